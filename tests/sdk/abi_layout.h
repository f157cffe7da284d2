/* The layout of every struct in specpipe/plugin.h as a list the C and the C++ compiler
 * both expand (c_layout.c, plugin_hpp_test.cpp): a plugin built by one must read the
 * structs the host built with the other byte for byte. Plain C. */
#ifndef SPECPIPE_TESTS_SDK_ABI_LAYOUT_H_
#define SPECPIPE_TESTS_SDK_ABI_LAYOUT_H_

#include <specpipe/plugin.h>
#include <stddef.h>

/* S(type): sizeof(type); F(type, field): offsetof(type, field). */
#define SPECPIPE_SDK_ABI_LAYOUT(S, F)                                                          \
  S(specpipe_host_api) F(specpipe_host_api, abi_version) F(specpipe_host_api, struct_size)     \
  F(specpipe_host_api, host) F(specpipe_host_api, write_slots) F(specpipe_host_api, alloc_device) \
  F(specpipe_host_api, free_device) F(specpipe_host_api, copy) F(specpipe_host_api, log)       \
  S(specpipe_model_desc) F(specpipe_model_desc, struct_size) F(specpipe_model_desc, num_layers) \
  F(specpipe_model_desc, num_kv_heads) F(specpipe_model_desc, head_dim) F(specpipe_model_desc, kv_dim) \
  F(specpipe_model_desc, block_size) F(specpipe_model_desc, max_gamma) F(specpipe_model_desc, max_batch) \
  F(specpipe_model_desc, device)                                                               \
  S(specpipe_window) F(specpipe_window, sequence) F(specpipe_window, n) F(specpipe_window, slots) \
  S(specpipe_layer_rows) F(specpipe_layer_rows, layer) F(specpipe_layer_rows, k) F(specpipe_layer_rows, v) \
  S(specpipe_window_verdict) F(specpipe_window_verdict, sequence) F(specpipe_window_verdict, accepted) \
  S(specpipe_kv_write_hooks) F(specpipe_kv_write_hooks, begin) F(specpipe_kv_write_hooks, stage) \
  F(specpipe_kv_write_hooks, commit) F(specpipe_kv_write_hooks, abort)                         \
  S(specpipe_plan_sequence) F(specpipe_plan_sequence, sequence) F(specpipe_plan_sequence, requested_gamma) \
  F(specpipe_plan_sequence, max_gamma) F(specpipe_plan_sequence, context_length)               \
  S(specpipe_plan_costs) F(specpipe_plan_costs, struct_size) F(specpipe_plan_costs, draft_step_ms) \
  F(specpipe_plan_costs, verify_base_ms) F(specpipe_plan_costs, verify_token_ms)               \
  F(specpipe_plan_costs, token_budget) F(specpipe_plan_costs, draft_base_ms)                    \
  F(specpipe_plan_costs, round_ms_by_gamma) F(specpipe_plan_costs, round_ms_by_gamma_count)    \
  S(specpipe_plan_observation) F(specpipe_plan_observation, sequence) F(specpipe_plan_observation, proposed) \
  F(specpipe_plan_observation, accepted)                                                       \
  S(specpipe_verify_plan_hooks) F(specpipe_verify_plan_hooks, plan) F(specpipe_verify_plan_hooks, observe) \
  F(specpipe_verify_plan_hooks, forget)                                                        \
  S(specpipe_plugin_table) F(specpipe_plugin_table, abi_version) F(specpipe_plugin_table, struct_size) \
  F(specpipe_plugin_table, name) F(specpipe_plugin_table, version) F(specpipe_plugin_table, slots) \
  F(specpipe_plugin_table, create) F(specpipe_plugin_table, destroy)                           \
  F(specpipe_plugin_table, describe_metrics) F(specpipe_plugin_table, kv_write)                \
  F(specpipe_plugin_table, verify_plan) F(specpipe_plugin_table, verify_view)                 \
  S(specpipe_view_sequence) F(specpipe_view_sequence, sequence) F(specpipe_view_sequence, context_length) \
  F(specpipe_view_sequence, verified_length) F(specpipe_view_sequence, window)                 \
  F(specpipe_view_sequence, rounds_since_full) F(specpipe_view_sequence, retrieval_ready)      \
  F(specpipe_view_sequence, sampled)                                                           \
  S(specpipe_view_decision) F(specpipe_view_decision, view) F(specpipe_view_decision, refresh) \
  F(specpipe_view_decision, final_verdicts) F(specpipe_view_decision, sink_tokens)             \
  F(specpipe_view_decision, retrieval_blocks) F(specpipe_view_decision, window_tokens)         \
  F(specpipe_view_decision, buffer_tokens)                                                     \
  S(specpipe_view_observation) F(specpipe_view_observation, sequence) F(specpipe_view_observation, view) \
  F(specpipe_view_observation, proposed) F(specpipe_view_observation, accepted)                \
  F(specpipe_view_observation, rolled_back)                                                    \
  S(specpipe_verify_view_hooks) F(specpipe_verify_view_hooks, decide) F(specpipe_verify_view_hooks, observe) \
  F(specpipe_verify_view_hooks, forget)

#ifdef __cplusplus
extern "C" {
#endif
/** Writes the layout list as the C compiler sees it into out[0, capacity); returns its
 *  length. Defined in c_layout.c. */
size_t specpipe_sdk_c_layout(size_t* out, size_t capacity);
#ifdef __cplusplus
}
#endif

#endif /* SPECPIPE_TESTS_SDK_ABI_LAYOUT_H_ */
