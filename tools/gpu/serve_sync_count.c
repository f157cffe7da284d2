// Counts the host's synchronising CUDA driver calls of a process (tools/gpu/serve_load.sh,
// issue 18 "host syncs per round"): LD_PRELOAD=libserve_sync_count.so, and at exit the
// counts go to $SERVE_SYNC_COUNT_FILE (else stderr), one "name count" per line.
//
// How it hooks: the CUDA runtime (linked statically into specpipe) opens libcuda with
// dlopen and takes every driver entry point from cuGetProcAddress, which it finds with
// dlsym. This library interposes dlsym: asked for cuGetProcAddress, it hands back a
// wrapper that, for the synchronising entry points below, returns counting wrappers
// around the real ones. Nothing else changes. "hooked" counts the entry points wrapped:
// 0 means the runtime took another path and the counts say nothing.
// Build: gcc -O2 -shared -fPIC -o libserve_sync_count.so tools/gpu/serve_sync_count.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long cuuint64_t;
typedef CUresult (*get_proc_v1)(const char*, void**, int, cuuint64_t);
typedef CUresult (*get_proc_v2)(const char*, void**, int, cuuint64_t, void*);
typedef void* (*dlsym_fn)(void*, const char*);

enum { STREAM_SYNC, EVENT_SYNC, CTX_SYNC, MEMCPY_DTOH, MEMCPY_HTOD, MEMCPY, STREAM_QUERY, EVENT_QUERY, KINDS };
static const char* const kNames[KINDS] = {"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
                                          "cuMemcpyDtoH",        "cuMemcpyHtoD",       "cuMemcpy",
                                          "cuStreamQuery",       "cuEventQuery"};
static atomic_llong counts[KINDS];
static atomic_int hooked;
static void* real[KINDS];
static get_proc_v1 real_get_v1;
static get_proc_v2 real_get_v2;

static dlsym_fn real_dlsym(void) {
  static dlsym_fn fn;
  if (!fn) fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!fn) fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  return fn;
}

// The wrappers: same arguments as the driver's (pointer-sized or 64-bit integers).
#define COUNTED(fn, kind, params, args)                                  \
  static CUresult fn params {                                            \
    atomic_fetch_add(&counts[kind], 1);                                  \
    return ((CUresult(*) params)real[kind]) args;                        \
  }
COUNTED(stream_sync, STREAM_SYNC, (void* s), (s))
COUNTED(event_sync, EVENT_SYNC, (void* e), (e))
COUNTED(ctx_sync, CTX_SYNC, (void), ())
COUNTED(memcpy_dtoh, MEMCPY_DTOH, (void* dst, cuuint64_t src, size_t n), (dst, src, n))
COUNTED(memcpy_htod, MEMCPY_HTOD, (cuuint64_t dst, const void* src, size_t n), (dst, src, n))
COUNTED(memcpy_any, MEMCPY, (cuuint64_t dst, cuuint64_t src, size_t n), (dst, src, n))
COUNTED(stream_query, STREAM_QUERY, (void* s), (s))
COUNTED(event_query, EVENT_QUERY, (void* e), (e))
static void* const kWrappers[KINDS] = {(void*)stream_sync, (void*)event_sync,  (void*)ctx_sync,
                                       (void*)memcpy_dtoh, (void*)memcpy_htod, (void*)memcpy_any,
                                       (void*)stream_query, (void*)event_query};

static CUresult get_v1(const char*, void**, int, cuuint64_t);
static CUresult get_v2(const char*, void**, int, cuuint64_t, void*);

// After the driver answered `symbol` with *pfn: swap in a counting wrapper where wanted.
static void swap(const char* symbol, void** pfn) {
  if (!pfn || !*pfn) return;
  if (strcmp(symbol, "cuGetProcAddress") == 0) {
    // The runtime may ask the driver for cuGetProcAddress itself (v2 since CUDA 12).
    if (!real_get_v2) real_get_v2 = (get_proc_v2)*pfn;
    *pfn = (void*)get_v2;
    return;
  }
  for (int k = 0; k < KINDS; ++k)
    if (strcmp(symbol, kNames[k]) == 0) {
      real[k] = *pfn;
      *pfn = kWrappers[k];
      atomic_fetch_add(&hooked, 1);
      return;
    }
}

static CUresult get_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  CUresult r = real_get_v1(symbol, pfn, version, flags);
  if (r == 0) swap(symbol, pfn);
  return r;
}
static CUresult get_v2(const char* symbol, void** pfn, int version, cuuint64_t flags, void* status) {
  CUresult r = real_get_v2(symbol, pfn, version, flags, status);
  if (r == 0) swap(symbol, pfn);
  return r;
}

void* dlsym(void* handle, const char* name) {
  void* p = real_dlsym()(handle, name);
  if (!p) return p;
  if (strcmp(name, "cuGetProcAddress_v2") == 0) {
    real_get_v2 = (get_proc_v2)p;
    return (void*)get_v2;
  }
  if (strcmp(name, "cuGetProcAddress") == 0) {
    real_get_v1 = (get_proc_v1)p;
    return (void*)get_v1;
  }
  for (int k = 0; k < KINDS; ++k)  // a caller taking the entry point by name
    if (strcmp(name, kNames[k]) == 0 || (strncmp(name, kNames[k], strlen(kNames[k])) == 0 &&
                                         strcmp(name + strlen(kNames[k]), "_v2") == 0)) {
      real[k] = p;
      atomic_fetch_add(&hooked, 1);
      return kWrappers[k];
    }
  return p;
}

__attribute__((destructor)) static void report(void) {
  const char* path = getenv("SERVE_SYNC_COUNT_FILE");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (!f) f = stderr;
  fprintf(f, "hooked %d\n", atomic_load(&hooked));
  for (int k = 0; k < KINDS; ++k) fprintf(f, "%s %lld\n", kNames[k], atomic_load(&counts[k]));
  if (f != stderr) fclose(f);
}
