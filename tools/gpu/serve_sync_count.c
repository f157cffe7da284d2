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
// Call sites (SERVE_SYNC_COUNT_SITES=N, N frames, at most 24; off by default): every
// counted call also takes a backtrace of the N frames above this library, and the calls
// of each distinct (entry point, frames) are counted; at exit they go to
// $SERVE_SYNC_COUNT_FILE.sites (else stderr), most frequent first, one site a line:
// "count name frame...", a frame as object+0xoffset (the offset in that object's file
// image: for the stripped bundle's specpipe, `addr2line -f -C -e <the unstripped build's
// specpipe> 0xoffset` names it; tools/gpu/serve_sync_sites.py does that for a whole file).
// Checked on the CPU only, with a fake driver library: on an H100 (2026-11-27) every
// server preloaded with SERVE_SYNC_COUNT_SITES=8 failed at start ("CUDA forward: upload:
// context is destroyed") while the same servers counted without it; cause not found.
// Build: gcc -O2 -shared -fPIC -o libserve_sync_count.so tools/gpu/serve_sync_count.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
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

// Call sites (SERVE_SYNC_COUNT_SITES): a small table under a spin lock, filled in order.
enum { MAX_FRAMES = 24, MAX_SITES = 1024 };
struct site {
  int kind, depth;
  void* frames[MAX_FRAMES];
  long long count;
};
static struct site sites[MAX_SITES];
static int n_sites;
static long long sites_dropped;  // calls of sites past the table's room
static atomic_flag sites_lock = ATOMIC_FLAG_INIT;
static int site_frames;  // 0: off
static void* own_base;   // this library's load address: its frames are skipped

static void note_site(int kind) {
  void* raw[MAX_FRAMES + 8];
  const int n = backtrace(raw, site_frames + 8);
  struct site key = {kind, 0, {0}, 1};
  for (int i = 0; i < n && key.depth < site_frames; ++i) {
    Dl_info info;
    if (key.depth == 0 && dladdr(raw[i], &info) && info.dli_fbase == own_base) continue;
    key.frames[key.depth++] = raw[i];
  }
  while (atomic_flag_test_and_set_explicit(&sites_lock, memory_order_acquire)) {
  }
  int i = 0;
  while (i < n_sites && !(sites[i].kind == kind && sites[i].depth == key.depth &&
                          memcmp(sites[i].frames, key.frames, sizeof(void*) * (size_t)key.depth) == 0))
    ++i;
  if (i < n_sites) ++sites[i].count;
  else if (n_sites < MAX_SITES) sites[n_sites++] = key;
  else ++sites_dropped;
  atomic_flag_clear_explicit(&sites_lock, memory_order_release);
}

// The wrappers: same arguments as the driver's (pointer-sized or 64-bit integers).
#define COUNTED(fn, kind, params, args)                                  \
  static CUresult fn params {                                            \
    atomic_fetch_add(&counts[kind], 1);                                  \
    if (site_frames > 0) note_site(kind);                                \
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

__attribute__((constructor)) static void start(void) {
  const char* frames = getenv("SERVE_SYNC_COUNT_SITES");
  const int n = frames ? atoi(frames) : 0;
  if (n <= 0) return;
  Dl_info info;
  if (dladdr((void*)note_site, &info)) own_base = info.dli_fbase;
  void* warm[1];
  backtrace(warm, 1);  // the unwinder is loaded now, not inside the first counted call
  site_frames = n < MAX_FRAMES ? n : MAX_FRAMES;
}

static int by_count(const void* a, const void* b) {
  const long long x = ((const struct site*)a)->count, y = ((const struct site*)b)->count;
  return (x < y) - (x > y);
}

static void report_sites(const char* path) {
  char sites_path[4096];
  FILE* f = NULL;
  if (path && snprintf(sites_path, sizeof sites_path, "%s.sites", path) < (int)sizeof sites_path)
    f = fopen(sites_path, "w");
  if (!f) f = stderr;
  qsort(sites, (size_t)n_sites, sizeof sites[0], by_count);
  for (int i = 0; i < n_sites; ++i) {
    fprintf(f, "%lld %s", sites[i].count, kNames[sites[i].kind]);
    for (int d = 0; d < sites[i].depth; ++d) {
      Dl_info info;
      if (dladdr(sites[i].frames[d], &info) && info.dli_fname) {
        const char* slash = strrchr(info.dli_fname, '/');
        fprintf(f, " %s+0x%lx", slash ? slash + 1 : (info.dli_fname[0] ? info.dli_fname : "?"),
                (unsigned long)((char*)sites[i].frames[d] - (char*)info.dli_fbase));
      } else {
        fprintf(f, " ?%p", sites[i].frames[d]);
      }
    }
    fputc('\n', f);
  }
  if (sites_dropped) fprintf(f, "%lld (calls of further sites, not kept)\n", sites_dropped);
  if (f != stderr) fclose(f);
}

__attribute__((destructor)) static void report(void) {
  const char* path = getenv("SERVE_SYNC_COUNT_FILE");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (!f) f = stderr;
  fprintf(f, "hooked %d\n", atomic_load(&hooked));
  for (int k = 0; k < KINDS; ++k) fprintf(f, "%s %lld\n", kNames[k], atomic_load(&counts[k]));
  if (f != stderr) fclose(f);
  if (site_frames > 0) report_sites(path);
}
