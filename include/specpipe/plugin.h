/* specpipe plugin SDK: the C ABI between the engine (the host) and a strategy plugin.
 *
 * A plugin is one shared library built against this header only. It exports
 *
 *     const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version);
 *
 * which returns a static table of function pointers: the table's first two fields are
 * its ABI version and its size, so the host can refuse a plugin built for another ABI
 * before calling anything else. The host dlopen()s the library (RTLD_LOCAL), checks the
 * table, creates an instance per pipeline with the plugin's config (JSON text), and calls
 * the hooks of the slots the instance fills.
 *
 * Rules (see docs/PLUGIN_SDK.md):
 *  - Plain C: no exceptions and no C++ types cross this boundary. Every hook returns a
 *    specpipe_status; on failure it writes a NUL-terminated message into the caller's
 *    buffer (error, error_size) when given one.
 *  - Status codes: 0 = ok; > 0 = declined, recoverable (the host takes its built-in path
 *    for this call, nothing changed); < 0 = error (the host disables the plugin for the
 *    pipeline, falls back to the slot's built-in strategy, and counts the fallback).
 *  - Ownership is stated on every function: "borrowed" pointers are valid for the call
 *    only; the instance is owned by the plugin between create() and destroy().
 *  - Tensors are DLPack DLTensors (dlpack/dlpack.h): dense, row-major, strides NULL.
 *  - Streams are opaque handles: NULL on the CPU backend; a cudaStream_t on CUDA.
 *  - Hooks of one instance are never called concurrently.
 */
#ifndef SPECPIPE_PLUGIN_H_
#define SPECPIPE_PLUGIN_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped on any incompatible change to the structs or calls below. */
#define SPECPIPE_PLUGIN_ABI_VERSION 1u
/** Bumped on each compatible addition: fields appended to the end of a struct that has
 *  a struct_size. The host reads a plugin's table up to the plugin's struct_size and
 *  treats later fields as NULL, so a plugin built for an older minor version still
 *  loads. 1.0: kv_write, verify_plan. 1.1: verify_view (table field appended). 1.2:
 *  specpipe_plan_costs.draft_base_ms (appended; read up to the host's struct_size). 1.3:
 *  specpipe_view_decision.refresh may be SPECPIPE_REFRESH_BY_MASS (a 1.2 host refuses it);
 *  specpipe_plan_costs.round_ms_by_gamma and its count (appended; read up to the host's
 *  struct_size). */
#define SPECPIPE_PLUGIN_ABI_MINOR_VERSION 3u

#if defined(_WIN32)
#define SPECPIPE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define SPECPIPE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

typedef int32_t specpipe_status;
#define SPECPIPE_OK 0
#define SPECPIPE_DECLINED 1           /* recoverable: use the built-in path this time */
#define SPECPIPE_ERR_INVALID_ARGUMENT (-1)
#define SPECPIPE_ERR_CONFIG (-2)      /* create(): the plugin's config is unusable */
#define SPECPIPE_ERR_CAPACITY (-3)
#define SPECPIPE_ERR_INTERNAL (-4)

typedef void* specpipe_stream; /* opaque: NULL (CPU) or a cudaStream_t */

/* ------------------------------------------------------------------------------------
 * Host services: a table the host passes to create(). The plugin borrows it for the
 * instance's lifetime (it stays valid until destroy()).
 * ------------------------------------------------------------------------------------ */
typedef struct specpipe_host_api {
  uint32_t abi_version; /* SPECPIPE_PLUGIN_ABI_VERSION of the host */
  uint32_t struct_size; /* sizeof(specpipe_host_api) as the host knows it */
  void* host;           /* opaque: pass back as the first argument of every service */

  /* Writes rows [0, n) of k_rows and v_rows ([n, kv_dim] float32 on the pool's device)
   * into the target KV pool of `layer` at pool slots slots[0..n). Borrowed arguments;
   * ordered on `stream`. Returns SPECPIPE_OK or an error (nothing written then). */
  specpipe_status (*write_slots)(void* host, int32_t layer, const DLTensor* k_rows, const DLTensor* v_rows,
                                 const int64_t* slots, int64_t n, specpipe_stream stream);

  /* Allocates `bytes` on the pool's device (64-byte aligned); NULL on failure. The plugin
   * owns the memory and returns it with free_device(). */
  void* (*alloc_device)(void* host, size_t bytes);
  void (*free_device)(void* host, void* ptr);

  /* Copies `bytes` between device buffers, ordered on `stream`. */
  specpipe_status (*copy)(void* host, void* dst, const void* src, size_t bytes, specpipe_stream stream);

  /* Logs a NUL-terminated message: level 0 debug, 1 info, 2 warning, 3 error. */
  void (*log)(void* host, int32_t level, const char* message);
} specpipe_host_api;

/** What the host knows about the target model and the pool, given to create(). */
typedef struct specpipe_model_desc {
  uint32_t struct_size;
  int32_t num_layers;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t kv_dim;     /* num_kv_heads * head_dim: floats per K (or V) row */
  int32_t block_size; /* tokens per KV block */
  int32_t max_gamma;  /* slots.drafter.max_gamma: the most drafts a sequence gets in a round;
                         a verify window is max_gamma + 1 tokens (pending + drafts), plus one
                         recomputed token after a failed kv_write commit */
  int32_t max_batch;  /* sequences per round */
  DLDevice device;
} specpipe_model_desc;

/* ------------------------------------------------------------------------------------
 * Slot `kv_write`: where the K/V of a verify forward go. The built-in strategy writes
 * every row into the pool during the forward and truncates rejected tokens afterwards.
 * A plugin may instead stage the rows and write only accepted ones at commit.
 *
 * Per round: begin() once -> stage() once per layer, layers in order -> exactly one of
 * commit() (after the verdict) or abort() (the forward failed).
 * ------------------------------------------------------------------------------------ */

/** One sequence's verify window in this round. */
typedef struct specpipe_window {
  int64_t sequence;     /* stable id of the sequence */
  int32_t n;            /* tokens in the window: pending + drafts */
  const int64_t* slots; /* [n]: the pool slot of each token; the same for every layer */
} specpipe_window;

/** One layer's K/V rows for every window of the round, in window order. */
typedef struct specpipe_layer_rows {
  int32_t layer;
  const DLTensor* k; /* [total_rows, kv_dim] float32, borrowed for the call */
  const DLTensor* v; /* same shape */
} specpipe_layer_rows;

/** The verdict of one window: its first `accepted` rows become committed. */
typedef struct specpipe_window_verdict {
  int64_t sequence;
  int32_t accepted; /* pending + accepted drafts: 1..n */
} specpipe_window_verdict;

typedef struct specpipe_kv_write_hooks {
  /* Required. A round starts. Return SPECPIPE_DECLINED to let the host write this round
   * directly (e.g. the windows do not fit the staging buffer). Borrowed arguments. */
  specpipe_status (*begin)(void* instance, const specpipe_window* windows, int32_t count, char* error,
                           size_t error_size);
  /* Required. One layer's rows: stage them (copy what you keep; the tensors are borrowed).
   * A non-zero status makes the host write this round directly from here on. */
  specpipe_status (*stage)(void* instance, const specpipe_layer_rows* rows, specpipe_stream stream, char* error,
                           size_t error_size);
  /* Required. Write the accepted rows of every layer with host->write_slots, all layers
   * of a window or none. An error makes the host discard the staged round and redo its
   * accepted tokens on the direct path: the pool never holds a half-committed token. */
  specpipe_status (*commit)(void* instance, const specpipe_window_verdict* verdicts, int32_t count,
                            specpipe_stream stream, char* error, size_t error_size);
  /* Required. Drop whatever the round staged. Cannot fail. */
  void (*abort)(void* instance);
} specpipe_kv_write_hooks;

/* ------------------------------------------------------------------------------------
 * Slot `verify_plan`: how many drafts each sequence gets this round. The built-in
 * strategy gives every sequence the pipeline's gamma.
 * ------------------------------------------------------------------------------------ */

typedef struct specpipe_plan_sequence {
  int64_t sequence;
  int32_t requested_gamma; /* the request's (or the pipeline's) gamma */
  int32_t max_gamma;       /* this round's cap: model_desc.max_gamma, less near the end of the
                              model's positions; 0 if the request asked for gamma 0 */
  int32_t context_length;  /* tokens in its KV */
} specpipe_plan_sequence;

/** Costs the host measured for a round of this many sequences, in milliseconds (running
 *  averages; 0 = not measured yet). A round with gammas g_i, G = max g_i, costs
 *  (G > 0 ? draft_base_ms : 0) + G * draft_step_ms + verify_base_ms
 *  + verify_token_ms * sum_i (1 + g_i). */
typedef struct specpipe_plan_costs {
  uint32_t struct_size;
  double draft_step_ms;   /* one more draft token for the whole batch (marginal cost) */
  double verify_base_ms;  /* a round's fixed cost with or without drafts: the round without
                             drafts less its window tokens' share */
  double verify_token_ms; /* each window token's additional cost (slope) */
  int32_t token_budget;   /* most window tokens in one verify pass (0 = unlimited) */
  double draft_base_ms;   /* (ABI 1.2) what a round pays once any sequence drafts: the
                             drafter's fixed cost per round (its sync, its catch-up, the
                             round's extra host work) */
  /* (ABI 1.3) For a batch of one sequence: what a round that drafted g tokens usually
   * costs end to end, measured, for g in [0, round_ms_by_gamma_count); 0 where not
   * measured. On a device the line above misses how drafting's cost bends with g (the
   * first draft pays the drafter's launch; a long chain drafting ahead outruns the
   * verify forward it runs beside). NULL with count 0 otherwise. Borrowed for the call. */
  const double* round_ms_by_gamma;
  int32_t round_ms_by_gamma_count;
} specpipe_plan_costs;

/** What happened to one sequence in the last round. */
typedef struct specpipe_plan_observation {
  int64_t sequence;
  int32_t proposed;
  int32_t accepted;
} specpipe_plan_observation;

typedef struct specpipe_verify_plan_hooks {
  /* Required. Write gamma[i] in [0, sequences[i].max_gamma] for every sequence (0 = no
   * drafts: a plain decode step). Borrowed arguments; `gamma` has `count` entries. */
  specpipe_status (*plan)(void* instance, const specpipe_plan_sequence* sequences, int32_t count,
                          const specpipe_plan_costs* costs, int32_t* gamma, char* error, size_t error_size);
  /* Optional (may be NULL). The round's outcome, after its verdicts. */
  void (*observe)(void* instance, const specpipe_plan_observation* observations, int32_t count);
  /* Optional. A sequence ended: forget it. */
  void (*forget)(void* instance, int64_t sequence);
} specpipe_verify_plan_hooks;

/* ------------------------------------------------------------------------------------
 * Slot `verify_view` (ABI 1.1): which K/V the target's verify window attends to. The
 * built-in strategy always verifies against the full K/V. A plugin (SpecPV) may verify
 * most rounds against a partial view - sink + retrieved blocks + recent window, with the
 * window's own tokens as the speculative buffer - and run a full verification every few
 * rounds. What a partial verdict means (provisional until a full pass agrees, or final)
 * is the plugin's `final` flag; the host enforces the rest (docs/PLUGIN_SDK.md).
 * ------------------------------------------------------------------------------------ */

/** One sequence about to be verified. */
typedef struct specpipe_view_sequence {
  int64_t sequence;
  int32_t context_length;     /* tokens in its KV before this round's window */
  int32_t verified_length;    /* of those, the tokens last checked by a full verification */
  int32_t window;             /* tokens in this round's window (pending + drafts) */
  int32_t rounds_since_full;  /* partial rounds since the last full verification */
  int32_t retrieval_ready;    /* 1: retrieved blocks exist (a full round refreshed them) */
  int32_t sampled;            /* 1: the request samples (the host verifies it fully) */
} specpipe_view_sequence;

#define SPECPIPE_VIEW_FULL 0
#define SPECPIPE_VIEW_PARTIAL 1
#define SPECPIPE_REFRESH_BY_MASS 2

/** The plugin's answer for one sequence. Budgets count tokens, except retrieval_blocks. */
typedef struct specpipe_view_decision {
  int32_t view;             /* SPECPIPE_VIEW_FULL or SPECPIPE_VIEW_PARTIAL */
  int32_t refresh;          /* full rounds: 1 = re-select the retrieved blocks from this
                               round's queries (Quest's bound on the block summaries);
                               SPECPIPE_REFRESH_BY_MASS (2, ABI 1.3) = by the attention
                               mass this round's full verification gives each block, where
                               the backend computes it (else as 1) */
  int32_t final_verdicts;   /* partial rounds: 1 = its verdict is final (approximate, not
                               lossless); 0 = provisional until a full pass agrees */
  int32_t sink_tokens;      /* partial: the first tokens, always in view (>= 0) */
  int32_t retrieval_blocks; /* partial: retrieved blocks per layer (>= 1) */
  int32_t window_tokens;    /* partial: the most recent tokens (>= 0) */
  int32_t buffer_tokens;    /* partial: the most tokens since the last full verification
                               (>= 0); more make the host verify fully */
} specpipe_view_decision;

/** What happened to one sequence in the round just verified. */
typedef struct specpipe_view_observation {
  int64_t sequence;
  int32_t view;       /* the view it was verified with */
  int32_t proposed;   /* drafts verified (a full round re-checking provisional tokens
                         counts only the round's new drafts) */
  int32_t accepted;
  int32_t rolled_back; /* full rounds: provisional tokens found wrong and dropped */
} specpipe_view_observation;

typedef struct specpipe_verify_view_hooks {
  /* Required. Writes decisions[i] for every sequence. Borrowed arguments. A decision
   * the host cannot use (unknown view, negative budgets, zero retrieval blocks) disables
   * the plugin: every sequence is then verified fully. */
  specpipe_status (*decide)(void* instance, const specpipe_view_sequence* sequences, int32_t count,
                            specpipe_view_decision* decisions, char* error, size_t error_size);
  /* Optional (may be NULL). The round's outcome, after its verdicts. */
  void (*observe)(void* instance, const specpipe_view_observation* observations, int32_t count);
  /* Optional. A sequence ended: forget it. */
  void (*forget)(void* instance, int64_t sequence);
} specpipe_verify_view_hooks;

/* ------------------------------------------------------------------------------------
 * The plugin table.
 * ------------------------------------------------------------------------------------ */

typedef struct specpipe_plugin_table {
  uint32_t abi_version; /* first field, always: SPECPIPE_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(specpipe_plugin_table) as the plugin was built */
  const char* name;     /* e.g. "nwor"; static string */
  const char* version;  /* the plugin's own version; static string */
  const char* slots;    /* comma-separated slots it can fill: "kv_write", "verify_plan",
                           "verify_view" (1.1) */

  /* Required. Creates an instance for one pipeline. config_json: the plugin's config
   * block as a JSON object (borrowed). host, model: borrowed until destroy(). On success
   * writes the new instance (owned by the plugin) to *instance. Return SPECPIPE_ERR_CONFIG
   * with a message for a config the plugin refuses. */
  specpipe_status (*create)(const specpipe_host_api* host, const specpipe_model_desc* model,
                            const char* config_json, void** instance, char* error, size_t error_size);
  /* Required. Frees the instance and everything it owns. */
  void (*destroy)(void* instance);
  /* Optional. Writes the instance's counters as a JSON object into buffer (at most size
   * bytes with the NUL). Returns the length it needed (larger than size: truncated). */
  size_t (*describe_metrics)(void* instance, char* buffer, size_t size);

  /* The hooks of the slots named in `slots` (required there), else NULL. */
  const specpipe_kv_write_hooks* kv_write;
  const specpipe_verify_plan_hooks* verify_plan;
  /* ABI 1.1: absent from (NULL for) a table whose struct_size ends before it. */
  const specpipe_verify_view_hooks* verify_view;
} specpipe_plugin_table;

/** The size of a 1.0 table (up to verify_plan): the smallest table the host accepts. */
#define SPECPIPE_PLUGIN_TABLE_SIZE_1_0 offsetof(specpipe_plugin_table, verify_view)

/** The one symbol a plugin exports. Returns NULL if it cannot serve this host ABI. */
typedef const specpipe_plugin_table* (*specpipe_plugin_entry_fn)(uint32_t host_abi_version);
#define SPECPIPE_PLUGIN_ENTRY_SYMBOL "specpipe_plugin_entry"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPECPIPE_PLUGIN_H_ */
