#include "pipeline/view_planner.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

namespace specpipe {
namespace {

/// Why a plugin's decision is unusable, or nullopt.
std::optional<std::string> check(const specpipe_view_decision& d) {
  auto flag = [](int32_t v) { return v == 0 || v == 1; };
  if (d.view != SPECPIPE_VIEW_FULL && d.view != SPECPIPE_VIEW_PARTIAL) return fmt::format("view {}", d.view);
  if ((!flag(d.refresh) && d.refresh != SPECPIPE_REFRESH_BY_MASS) || !flag(d.final_verdicts))
    return fmt::format("refresh {} (0, 1 or 2) / final_verdicts {} (0 or 1)", d.refresh, d.final_verdicts);
  if (d.view == SPECPIPE_VIEW_FULL && d.refresh == 0) return std::nullopt;  // budgets unused
  if (d.sink_tokens < 0 || d.window_tokens < 0 || d.buffer_tokens < 0)
    return fmt::format("negative budget (sink {}, window {}, buffer {})", d.sink_tokens, d.window_tokens,
                       d.buffer_tokens);
  if (d.retrieval_blocks < 1)
    return fmt::format("{} with {} retrieval blocks", d.view == SPECPIPE_VIEW_PARTIAL ? "a partial view" : "a refresh",
                       d.retrieval_blocks);
  return std::nullopt;
}

}  // namespace

void FullViewPlanner::decide(std::span<const ViewSequence>, std::span<ViewDecision> decisions) {
  for (ViewDecision& d : decisions) d = ViewDecision{};
}

void PluginViewPlanner::decide(std::span<const ViewSequence> sequences, std::span<ViewDecision> decisions) {
  if (!plugin_->disabled()) {
    std::vector<specpipe_view_sequence> in;
    for (const ViewSequence& s : sequences)
      in.push_back({s.request, s.context_length, s.verified_length, s.window, s.rounds_since_full,
                    s.retrieval_ready ? 1 : 0, s.sampled ? 1 : 0});
    // Garbage in the answer buffer is what an unwritten decision reads as: refused below.
    std::vector<specpipe_view_decision> out(sequences.size(), specpipe_view_decision{-1, -1, -1, -1, -1, -1, -1});
    const specpipe_status s = plugin_->call("decide", [&](char* err, size_t n) {
      return plugin_->table().verify_view->decide(plugin_->handle(), in.data(), static_cast<int32_t>(in.size()),
                                                 out.data(), err, n);
    });
    if (s > 0) {
      plugin_->count_fallback("declined");
    } else if (s < 0) {
      plugin_->disable("decide_failed");
    } else {
      for (size_t i = 0; i < out.size(); ++i)
        if (auto why = check(out[i])) {
          plugin_->disable("decide_out_of_range", fmt::format("decide gave {} for sequence {}", *why, in[i].sequence));
          break;
        }
      if (!plugin_->disabled()) {
        for (size_t i = 0; i < out.size(); ++i) {
          const specpipe_view_decision& d = out[i];
          decisions[i] = {d.view == SPECPIPE_VIEW_PARTIAL, d.refresh != 0, d.refresh == SPECPIPE_REFRESH_BY_MASS,
                          d.final_verdicts == 1,
                          {d.sink_tokens, d.retrieval_blocks, d.window_tokens, d.buffer_tokens}};
        }
        return;
      }
    }
  }
  fallback_.decide(sequences, decisions);
}

void PluginViewPlanner::observe(std::span<const ViewObservation> observations) {
  if (plugin_->disabled() || !plugin_->table().verify_view->observe) return;
  std::vector<specpipe_view_observation> in;
  for (const ViewObservation& o : observations)
    in.push_back({o.request, o.partial ? SPECPIPE_VIEW_PARTIAL : SPECPIPE_VIEW_FULL, o.proposed, o.accepted,
                  o.rolled_back});
  const specpipe_status s = plugin_->call("observe", [&](char*, size_t) {
    plugin_->table().verify_view->observe(plugin_->handle(), in.data(), static_cast<int32_t>(in.size()));
    return SPECPIPE_OK;
  });
  if (s != SPECPIPE_OK) plugin_->disable("observe_failed");
}

void PluginViewPlanner::forget(RequestId request) {
  if (plugin_->disabled() || !plugin_->table().verify_view->forget) return;
  const specpipe_status s = plugin_->call("forget", [&](char*, size_t) {
    plugin_->table().verify_view->forget(plugin_->handle(), request);
    return SPECPIPE_OK;
  });
  if (s != SPECPIPE_OK) plugin_->disable("forget_failed");
}

}  // namespace specpipe
