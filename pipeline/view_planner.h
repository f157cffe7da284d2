#pragma once
/// The `verify_view` slot: which K/V each sequence's verify window attends to this round
/// (ARCHITECTURE.md section 6). The built-in strategy always verifies against the full
/// K/V; a plugin (SpecPV) asks for partial views most rounds and full ones every few.
/// The scheduler enforces what makes a decision safe (docs/PLUGIN_SDK.md, verify_view).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstore/partial_view.h"
#include "pipeline/drafter.h"
#include "pipeline/plugin_instance.h"

namespace specpipe {

struct ViewSequence {
  RequestId request;
  int32_t context_length;     ///< tokens in its KV before the window
  int32_t verified_length;    ///< of those, the ones a full verification last checked
  int32_t window;             ///< pending + drafts
  int32_t rounds_since_full;
  bool retrieval_ready;
  bool sampled;
};

struct ViewDecision {
  bool partial = false;
  bool refresh = false;         ///< full rounds: re-select the retrieved blocks
  bool by_mass = false;         ///< ... by this round's attention mass (refresh 2), else by Quest's bound
  bool final_verdicts = false;  ///< partial rounds: approximate (verdicts are final)
  ViewBudget budget;
};

struct ViewObservation {
  RequestId request;
  bool partial;
  int32_t proposed, accepted, rolled_back;
};

class ViewPlanner {
 public:
  virtual ~ViewPlanner() = default;
  virtual std::string name() const = 0;
  virtual void decide(std::span<const ViewSequence> sequences, std::span<ViewDecision> decisions) = 0;
  virtual void observe(std::span<const ViewObservation> /*observations*/) {}
  virtual void forget(RequestId /*request*/) {}
  virtual nlohmann::json metrics() const { return nlohmann::json::object(); }
};

/// The built-in strategy: every round verifies against the full K/V.
class FullViewPlanner final : public ViewPlanner {
 public:
  std::string name() const override { return "full"; }
  void decide(std::span<const ViewSequence> sequences, std::span<ViewDecision> decisions) override;
};

/// A plugin in the slot. A decision the host cannot use (unknown view, a flag not 0 or
/// 1 - refresh may also be 2 -, negative budgets, a partial view with no retrieval blocks) disables the plugin
/// (counted): from then on every round verifies fully, so a bad plugin costs speed,
/// never a wrong token.
class PluginViewPlanner final : public ViewPlanner {
 public:
  explicit PluginViewPlanner(std::shared_ptr<PluginInstance> plugin) : plugin_(std::move(plugin)) {}
  std::string name() const override { return plugin_->name(); }
  void decide(std::span<const ViewSequence> sequences, std::span<ViewDecision> decisions) override;
  void observe(std::span<const ViewObservation> observations) override;
  void forget(RequestId request) override;
  nlohmann::json metrics() const override { return plugin_->metrics(); }

 private:
  std::shared_ptr<PluginInstance> plugin_;
  FullViewPlanner fallback_;
};

}  // namespace specpipe
