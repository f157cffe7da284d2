/* specpipe/plugin.h used from plain C99 (built with -std=c99 -pedantic -Werror): a plugin
 * written in C fills the table, and the program checks what the loader relies on: the
 * ABI version and struct size come first, the entry point refuses another ABI, the
 * status codes keep their documented signs, and the hooks work when called through the
 * table with a host table built in C. Exit code 0 when every check passes. */
#include <specpipe/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

/* ---- a verify_plan plugin in C ------------------------------------------------------ */

typedef struct c_planner {
  const specpipe_host_api* host;
  int32_t gamma;
  int64_t calls;
} c_planner;

static void set_error(char* error, size_t error_size, const char* message) {
  if (error && error_size > 0) {
    strncpy(error, message, error_size - 1);
    error[error_size - 1] = '\0';
  }
}

static specpipe_status c_create(const specpipe_host_api* host, const specpipe_model_desc* model,
                                const char* config_json, void** instance, char* error, size_t error_size) {
  c_planner* p;
  if (!instance || !host || !model || host->struct_size < sizeof(specpipe_host_api)) {
    set_error(error, error_size, "c_test: create: bad arguments");
    return SPECPIPE_ERR_INVALID_ARGUMENT;
  }
  *instance = NULL;
  if (config_json && strcmp(config_json, "refuse") == 0) {
    set_error(error, error_size, "c_test: create: config refused as asked");
    return SPECPIPE_ERR_CONFIG;
  }
  p = (c_planner*)malloc(sizeof *p);
  if (!p) return SPECPIPE_ERR_CAPACITY;
  p->host = host;
  p->gamma = model->max_gamma < 3 ? model->max_gamma : 3;
  p->calls = 0;
  if (host->log) host->log(host->host, 1, "c_test: created");
  *instance = p;
  return SPECPIPE_OK;
}

static void c_destroy(void* instance) { free(instance); }

static size_t c_describe_metrics(void* instance, char* buffer, size_t size) {
  const c_planner* p = (const c_planner*)instance;
  const int n = snprintf(buffer, size, "{\"plan_calls\": %ld}", (long)p->calls);
  return n < 0 ? 0 : (size_t)n;
}

static specpipe_status c_plan(void* instance, const specpipe_plan_sequence* sequences, int32_t count,
                              const specpipe_plan_costs* costs, int32_t* gamma, char* error, size_t error_size) {
  c_planner* p = (c_planner*)instance;
  int32_t i;
  (void)costs;
  if (count < 0 || (count > 0 && (!sequences || !gamma))) {
    set_error(error, error_size, "c_test: plan: bad arguments");
    return SPECPIPE_ERR_INVALID_ARGUMENT;
  }
  ++p->calls;
  for (i = 0; i < count; ++i) gamma[i] = p->gamma < sequences[i].max_gamma ? p->gamma : sequences[i].max_gamma;
  return SPECPIPE_OK;
}

static const specpipe_verify_plan_hooks c_verify_plan = {c_plan, NULL, NULL};

static const specpipe_plugin_table c_table = {
    SPECPIPE_PLUGIN_ABI_VERSION, sizeof(specpipe_plugin_table), "c_test", "0.0.1", "verify_plan",
    c_create, c_destroy, c_describe_metrics, NULL, &c_verify_plan, NULL};

/* The entry point a C plugin exports (here a plain function of the test program). */
SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version);
SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version) {
  return host_abi_version == SPECPIPE_PLUGIN_ABI_VERSION ? &c_table : NULL;
}

/* ---- a host table in C -------------------------------------------------------------- */

static int log_calls = 0;

static void host_log(void* host, int32_t level, const char* message) {
  (void)host;
  (void)level;
  if (message) ++log_calls;
}

static void check_layout(void) {
  /* The loader reads abi_version, then struct_size, before anything else. */
  CHECK(offsetof(specpipe_plugin_table, abi_version) == 0);
  CHECK(offsetof(specpipe_plugin_table, struct_size) == sizeof(uint32_t));
  CHECK(offsetof(specpipe_host_api, abi_version) == 0);
  CHECK(offsetof(specpipe_host_api, struct_size) == sizeof(uint32_t));
  CHECK(offsetof(specpipe_model_desc, struct_size) == 0);
  CHECK(offsetof(specpipe_plan_costs, struct_size) == 0);
  CHECK(SPECPIPE_PLUGIN_ABI_VERSION >= 1u);
  CHECK(strcmp(SPECPIPE_PLUGIN_ENTRY_SYMBOL, "specpipe_plugin_entry") == 0);
  /* Status codes: 0 ok, > 0 declined, < 0 errors, all distinct. */
  CHECK(SPECPIPE_OK == 0);
  CHECK(SPECPIPE_DECLINED > 0);
  CHECK(SPECPIPE_ERR_INVALID_ARGUMENT < 0 && SPECPIPE_ERR_CONFIG < 0 && SPECPIPE_ERR_CAPACITY < 0 &&
        SPECPIPE_ERR_INTERNAL < 0);
  CHECK(SPECPIPE_ERR_INVALID_ARGUMENT != SPECPIPE_ERR_CONFIG && SPECPIPE_ERR_CONFIG != SPECPIPE_ERR_CAPACITY &&
        SPECPIPE_ERR_CAPACITY != SPECPIPE_ERR_INTERNAL && SPECPIPE_ERR_INTERNAL != SPECPIPE_ERR_INVALID_ARGUMENT);
  CHECK(sizeof(specpipe_status) == 4);
}

static void check_table_and_hooks(void) {
  specpipe_plugin_entry_fn entry = specpipe_plugin_entry;
  const specpipe_plugin_table* t = entry(SPECPIPE_PLUGIN_ABI_VERSION);
  specpipe_host_api host;
  specpipe_model_desc model;
  specpipe_plan_sequence sequences[2];
  specpipe_plan_costs costs;
  int32_t gamma[2] = {-1, -1};
  void* instance = NULL;
  char error[64];
  char small[4];
  char metrics[64];
  size_t need;

  CHECK(entry(SPECPIPE_PLUGIN_ABI_VERSION + 1u) == NULL);
  CHECK(t != NULL);
  if (!t) return;
  CHECK(t->abi_version == SPECPIPE_PLUGIN_ABI_VERSION);
  CHECK(t->struct_size == sizeof(specpipe_plugin_table));
  CHECK(strcmp(t->slots, "verify_plan") == 0);
  CHECK(t->kv_write == NULL && t->verify_plan != NULL && t->verify_plan->plan != NULL);

  memset(&host, 0, sizeof host);
  host.abi_version = SPECPIPE_PLUGIN_ABI_VERSION;
  host.struct_size = sizeof host;
  host.log = host_log;
  memset(&model, 0, sizeof model);
  model.struct_size = sizeof model;
  model.max_gamma = 8;
  model.device.device_type = kDLCPU;
  model.device.device_id = 0;

  error[0] = '\0';
  CHECK(t->create(&host, &model, "refuse", &instance, error, sizeof error) == SPECPIPE_ERR_CONFIG);
  CHECK(instance == NULL);
  CHECK(strstr(error, "refused") != NULL);
  /* A message longer than the buffer is truncated, still NUL-terminated. */
  CHECK(t->create(&host, &model, "refuse", &instance, small, sizeof small) == SPECPIPE_ERR_CONFIG);
  CHECK(small[sizeof small - 1] == '\0' && strlen(small) == sizeof small - 1);

  CHECK(t->create(&host, &model, "{}", &instance, error, sizeof error) == SPECPIPE_OK);
  CHECK(instance != NULL);
  CHECK(log_calls == 1);
  if (!instance) return;

  sequences[0].sequence = 7;
  sequences[0].requested_gamma = 4;
  sequences[0].max_gamma = 5;
  sequences[0].context_length = 10;
  sequences[1].sequence = 8;
  sequences[1].requested_gamma = 4;
  sequences[1].max_gamma = 1;
  sequences[1].context_length = 20;
  memset(&costs, 0, sizeof costs);
  costs.struct_size = sizeof costs;
  CHECK(t->verify_plan->plan(instance, sequences, 2, &costs, gamma, error, sizeof error) == SPECPIPE_OK);
  CHECK(gamma[0] == 3 && gamma[1] == 1);
  CHECK(t->verify_plan->plan(instance, sequences, -1, &costs, gamma, error, sizeof error) ==
        SPECPIPE_ERR_INVALID_ARGUMENT);

  /* describe_metrics: snprintf's convention, result >= size means truncated. */
  need = t->describe_metrics(instance, small, sizeof small);
  CHECK(need >= sizeof small);
  need = t->describe_metrics(instance, metrics, sizeof metrics);
  CHECK(need < sizeof metrics && strcmp(metrics, "{\"plan_calls\": 1}") == 0);
  t->destroy(instance);
}

static void check_tensors(void) {
  /* A [2, 4] float32 K block as the host lends it to stage(). */
  float k[8] = {0};
  int64_t shape[2] = {2, 4};
  DLTensor tensor;
  specpipe_layer_rows rows;
  specpipe_window window;
  int64_t slots[2] = {16, 17};
  memset(&tensor, 0, sizeof tensor);
  tensor.data = k;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = 2;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  tensor.strides = NULL;
  rows.layer = 0;
  rows.k = &tensor;
  rows.v = &tensor;
  window.sequence = 1;
  window.n = 2;
  window.slots = slots;
  CHECK(rows.k->shape[0] * rows.k->shape[1] == 8 && rows.v->dtype.bits == 32 && window.slots[1] == 17);
}

int main(void) {
  check_layout();
  check_table_and_hooks();
  check_tensors();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("plugin.h from C99: all checks passed\n");
  return 0;
}
