#include "apps/pipeline_options.h"

#include <fmt/format.h>

#include "kernels/cpu/thread_pool.h"

namespace specpipe::app {

void PipelineOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--model", model, "target model: directory or name under models/")->capture_default_str();
  cmd.add_option("--draft", draft, "draft model for --drafter model")->capture_default_str();
  cmd.add_option("--drafter", drafter, "what proposes tokens: model or ngram")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "ngram"}));
  cmd.add_flag("--no-spec", no_spec, "plain decoding: no drafter, one token per target step");
  cmd.add_option("--gamma", gamma, "drafts per round")->capture_default_str()->check(CLI::Range(0, 16));
  cmd.add_option("--ngram-max", ngram_max, "longest n-gram the ngram drafter matches")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--ngram-min", ngram_min, "shortest n-gram the ngram drafter matches")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--kv-tokens", kv_tokens, "KV capacity in tokens (target; the draft's is as large)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--block-size", block_size, "tokens per KV block")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--prefill-chunk", prefill_chunk, "prompt tokens per prefill window")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--max-batch", max_batch, "sequences per round")->capture_default_str()->check(CLI::PositiveNumber);
}

PipelineConfig PipelineOptions::engine_config() const {
  PipelineConfig p;
  p.models.target = model;
  p.models.draft = draft;
  p.drafter.type = no_spec ? DrafterKind::none : parse_drafter_kind(drafter);
  p.drafter.gamma = gamma;
  p.drafter.ngram.max_ngram = ngram_max;
  p.drafter.ngram.min_ngram = ngram_min;
  p.kv.tokens = kv_tokens;
  p.kv.block_size = block_size;
  p.scheduler.prefill_chunk = prefill_chunk;
  p.scheduler.max_batch = max_batch;
  return p;
}

std::string format_summary(const actors::Completion& c, const PipelineOptions& o) {
  const SpecStats& s = c.stats;
  const double decode_s = (s.draft_ms + s.verify_ms + s.commit_ms + s.messaging_ms) / 1000.0;
  const std::string mode = o.no_spec ? "plain" : fmt::format("speculative ({}, gamma {})", o.drafter, o.gamma);
  std::string out = fmt::format(
      "prompt tokens: {} | generated: {} ({}) | prefill: {:.1f} ms | decode: {:.1f} tok/s | threads: {} | mode: {}\n",
      s.prompt_tokens, c.tokens.size(), to_string(c.reason), s.prefill_ms,
      decode_s > 0 ? static_cast<double>(s.generated) / decode_s : 0.0, cpu::num_threads(), mode);
  if (!o.no_spec) {
    std::string hist;
    for (size_t k = 0; k < s.accepted_hist.size(); ++k) hist += fmt::format("{}{}:{}", k ? " " : "", k, s.accepted_hist[k]);
    out += fmt::format(
        "rounds: {} | proposed: {} | accepted: {} ({:.1f}%) | tokens per target step: {:.2f} | accepted-length histogram: "
        "[{}]\n",
        s.rounds, s.proposed, s.accepted, 100.0 * s.acceptance_rate(), s.tokens_per_step(), hist);
  }
  out += fmt::format("time: draft {:.1f} ms | verify {:.1f} ms | kv commit {:.1f} ms | messaging {:.1f} ms\n", s.draft_ms,
                     s.verify_ms, s.commit_ms, s.messaging_ms);
  return out;
}

}  // namespace specpipe::app
