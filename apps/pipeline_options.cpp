#include "apps/pipeline_options.h"

#include <fmt/format.h>

#include "core/device.h"
#include "core/logging.h"
#include "kernels/cpu/thread_pool.h"
#include "pipeline/view_stats_json.h"

namespace specpipe::app {

void PipelineOptions::add_to(CLI::App& cmd) {
  PipelineConfig& d = defaults_;
  auto add = [&](CLI::Option* opt, void (*apply)(const PipelineOptions&, PipelineConfig&)) {
    overrides_.emplace_back(opt->capture_default_str(), apply);
  };
  cmd.add_option("--config", config_file_, "pipeline YAML file (docs/CONFIG.md); options below override it");
  add(cmd.add_option("--model", d.models.target, "target model: directory or name under models/"),
      [](const PipelineOptions& o, PipelineConfig& c) { c.models.target = o.defaults_.models.target; });
  add(cmd.add_option("--draft", d.models.draft, "draft model for --drafter model"),
      [](const PipelineOptions& o, PipelineConfig& c) { c.models.draft = o.defaults_.models.draft; });
  add(cmd.add_option("--drafter", drafter_, "what proposes tokens: model or ngram")->check(CLI::IsMember({"model", "ngram"})),
      [](const PipelineOptions& o, PipelineConfig& c) { c.drafter.type = parse_drafter_kind(o.drafter_); });
  add(cmd.add_flag("--no-spec", no_spec_, "plain decoding: no drafter, one token per target step"),
      [](const PipelineOptions& o, PipelineConfig& c) {
        if (o.no_spec_) c.drafter.type = DrafterKind::none;
      });
  add(cmd.add_option("--gamma", d.drafter.gamma, "drafts per round (slots.drafter.gamma)")->check(CLI::NonNegativeNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.drafter.gamma = o.defaults_.drafter.gamma; });
  add(cmd.add_option("--ngram-max", d.drafter.ngram.max_ngram, "longest n-gram the ngram drafter matches")->check(CLI::PositiveNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.drafter.ngram.max_ngram = o.defaults_.drafter.ngram.max_ngram; });
  add(cmd.add_option("--ngram-min", d.drafter.ngram.min_ngram, "shortest n-gram the ngram drafter matches")->check(CLI::PositiveNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.drafter.ngram.min_ngram = o.defaults_.drafter.ngram.min_ngram; });
  add(cmd.add_option("--device", device_, "where the models run: cpu or cuda:N (CUDA builds)")
          ->check([](const std::string& text) {
            try {
              Device::parse(text);
              return std::string();
            } catch (const std::exception& e) {
              return std::string(e.what());
            }
          }),
      [](const PipelineOptions& o, PipelineConfig& c) { c.device = Device::parse(o.device_).to_string(); });
  add(cmd.add_option("--kv-tokens", kv_tokens_,
                     "KV capacity in tokens (target; the draft's is as large), or auto on a device: "
                     "--kv-memory-fraction of the memory the weights left free")
          ->check(CLI::PositiveNumber | CLI::IsMember({"auto"})),
      [](const PipelineOptions& o, PipelineConfig& c) {
        c.kv.tokens = o.kv_tokens_ == "auto" ? KvConfig::kAuto : std::stoll(o.kv_tokens_);
      });
  add(cmd.add_option("--kv-memory-fraction", d.kv.memory_fraction, "share of the free device memory kv-tokens auto takes")
          ->check(CLI::Range(0.01, 1.0)),
      [](const PipelineOptions& o, PipelineConfig& c) { c.kv.memory_fraction = o.defaults_.kv.memory_fraction; });
  add(cmd.add_option("--kv-dtype", d.kv.dtype, "element type of the K/V store: fp32 or bf16 (CUDA devices)")
          ->check(CLI::IsMember({"fp32", "bf16"})),
      [](const PipelineOptions& o, PipelineConfig& c) { c.kv.dtype = o.defaults_.kv.dtype; });
  add(cmd.add_option("--block-size", d.kv.block_size, "tokens per KV block")->check(CLI::PositiveNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.kv.block_size = o.defaults_.kv.block_size; });
  add(cmd.add_flag("--offload", offload_, "move the oldest KV blocks to a host tier when the pool fills (CUDA: pinned)"),
      [](const PipelineOptions& o, PipelineConfig& c) { c.offload.enable = o.offload_; });
  add(cmd.add_option("--offload-host-bytes", d.offload.host_bytes, "host tier size in bytes (offload)")
          ->check(CLI::PositiveNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.offload.host_bytes = o.defaults_.offload.host_bytes; });
  add(cmd.add_option("--ring-slots", d.offload.ring_slots, "layer slots of the offload ring buffer (>= 2)")
          ->check(CLI::Range(2, 64)),
      [](const PipelineOptions& o, PipelineConfig& c) { c.offload.ring_slots = o.defaults_.offload.ring_slots; });
  add(cmd.add_option("--offload-prefill", d.offload.prefill,
                     "prompts longer than the pool (offload): layerwise (one layer at a time) or chunked")
          ->check(CLI::IsMember({"layerwise", "chunked"})),
      [](const PipelineOptions& o, PipelineConfig& c) { c.offload.prefill = o.defaults_.offload.prefill; });
  add(cmd.add_option("--prefill-chunk", d.scheduler.prefill_chunk, "prompt tokens per prefill window")->check(CLI::PositiveNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.scheduler.prefill_chunk = o.defaults_.scheduler.prefill_chunk; });
  add(cmd.add_option("--max-batch", d.scheduler.max_batch, "sequences per round")->check(CLI::PositiveNumber),
      [](const PipelineOptions& o, PipelineConfig& c) { c.scheduler.max_batch = o.defaults_.scheduler.max_batch; });
  add(cmd.add_option("--micro-batches", d.scheduler.micro_batches,
                     "rounds in flight at once: the running sequences split into this many micro-batches")
          ->check(CLI::Range(1, 16)),
      [](const PipelineOptions& o, PipelineConfig& c) { c.scheduler.micro_batches = o.defaults_.scheduler.micro_batches; });
}

GlobalOptions& global_options() {
  static GlobalOptions options;
  return options;
}

void apply_process_settings(const PipelineConfig& config) {
  const GlobalOptions& g = global_options();
  init_logging(g.log_level.empty() ? config.log_level : g.log_level);
  cpu::set_num_threads(g.threads >= 0 ? g.threads : config.threads);
}

PipelineConfig PipelineOptions::config() const { return config_from(config_file_); }

PipelineConfig PipelineOptions::config_from(const std::string& file) const {
  PipelineConfig c = file.empty() ? PipelineConfig{} : load_pipeline_config(file);
  for (const auto& [opt, apply] : overrides_)
    if (opt->count() > 0) apply(*this, c);
  return c;
}

std::string format_summary(const actors::Completion& c, const PipelineConfig& config) {
  const SpecStats& s = c.stats;
  const double decode_s = s.round_ms() / 1000.0;
  const bool spec = config.drafter.type != DrafterKind::none;
  const std::string mode =
      spec ? fmt::format("speculative ({}, gamma {})", to_string(config.drafter.type), config.drafter.gamma) : "plain";
  std::string out = fmt::format(
      "prompt tokens: {} | generated: {} ({}) | prefill: {:.1f} ms | decode: {:.1f} tok/s | {} | mode: {}\n",
      s.prompt_tokens, c.tokens.size(), to_string(c.reason), s.prefill_ms,
      decode_s > 0 ? static_cast<double>(s.generated) / decode_s : 0.0,
      config.device == "cpu" ? fmt::format("threads: {}", cpu::num_threads()) : "device: " + config.device, mode);
  if (spec) {
    std::string hist;
    for (size_t k = 0; k < s.accepted_hist.size(); ++k) hist += fmt::format("{}{}:{}", k ? " " : "", k, s.accepted_hist[k]);
    out += fmt::format(
        "rounds: {} | proposed: {} | accepted: {} ({:.1f}%) | tokens per target step: {:.2f} | accepted-length histogram: "
        "[{}]\n",
        s.rounds, s.proposed, s.accepted, 100.0 * s.acceptance_rate(), s.tokens_per_step(), hist);
    if (s.drafted_ahead > 0)
      out += fmt::format("drafted ahead (during the previous round's verification): {} of {} rounds\n",
                         s.drafted_ahead, s.rounds);
  }
  if (const ViewStats& v = s.view; v.partial_rounds() > 0)
    out += fmt::format("verify_view: {} | partial rounds: {} | full rounds: {} | acceptance partial {:.1f}% / full {:.1f}% "
                       "| rollbacks: {} ({} tokens) | refreshes: {}\n",
                       v.mode(), v.partial_rounds(), v.full_rounds, 100.0 * view_ratio(v.partial_accepted, v.partial_proposed),
                       100.0 * view_ratio(v.full_accepted, v.full_proposed), v.rollbacks, v.rolled_back_tokens,
                       v.refreshes);
  out += fmt::format("time: draft {:.1f} ms | verify {:.1f} ms | kv commit {:.1f} ms | messaging {:.1f} ms{}\n", s.draft_ms,
                     s.verify_ms, s.commit_ms, s.messaging_ms,
                     s.queued_ms > 0 ? fmt::format(" | queued behind other rounds {:.1f} ms", s.queued_ms) : "");
  return out;
}

}  // namespace specpipe::app

namespace specpipe::app {

std::string format_strategy_summary(const nlohmann::json& m) {
  std::string out;
  const nlohmann::json& kv = m["kv_write"];
  if (kv.value("strategy", "direct") != "direct") {
    const nlohmann::json& host = kv["plugin"]["host"];
    out += fmt::format("kv_write: {}{} | pool rows written: {} (prefill {}) | rejected rows not written: {} | "
                       "fallbacks: {}\n",
                       kv["strategy"].get<std::string>(), host.value("disabled", false) ? " (disabled)" : "",
                       kv["pool_rows_written"].get<int64_t>(), kv["prefill_rows_written"].get<int64_t>(),
                       kv["pool_rows_not_written"].get<int64_t>(), host["fallbacks"].dump());
  }
  if (m.contains("offload")) {
    const nlohmann::json& o = m["offload"];
    out += fmt::format("offload: {} blocks ({:.1f} MiB) to the host tier, {} of {} host blocks in use | ring: {} layer "
                       "loads ({:.1f} MiB), {} stalls ({:.1f} ms)\n",
                       o["blocks_to_host"].get<int64_t>(), o["bytes_to_host"].get<double>() / (1 << 20),
                       o["host_blocks_used"].get<int64_t>(), o["host_blocks_total"].get<int64_t>(),
                       o["ring_loads"].get<int64_t>(), o["ring_bytes_loaded"].get<double>() / (1 << 20),
                       o["ring_stalls"].get<int64_t>(), o["ring_stall_ms"].get<double>());
  }
  const nlohmann::json& plan = m["verify_plan"];
  if (plan.value("strategy", "fixed") != "fixed") {
    out += fmt::format("verify_plan: {}{} | gamma histogram: {} | fallbacks: {}\n", plan["strategy"].get<std::string>(),
                       plan["host"].value("disabled", false) ? " (disabled)" : "",
                       plan.contains("gamma_hist") ? plan["gamma_hist"].dump() : "n/a", plan["host"]["fallbacks"].dump());
  }
  return out;
}

}  // namespace specpipe::app
