// specpipe plugin SDK, C++ side: header-only helpers for plugin AUTHORS, beside the C ABI
// in specpipe/plugin.h (docs/PLUGIN_SDK.md walks through both).
//
// Needs C++17 and nothing but the standard library, plugin.h and dlpack/dlpack.h. Nothing
// here crosses the C boundary: the host still sees only plugin.h's table, and every
// trampoline below catches every exception and turns it into a status plus a message in
// the caller's error buffer.
//
// What is here:
//   Error, check()          an exception that carries a specpipe_status to the boundary
//   write_error()           NUL-terminated, truncating, allocation-free error writer
//   write_metrics()         describe_metrics' buffer convention (snprintf's)
//   Span<T>                 a (pointer, count) view of the arrays the host lends
//   TensorView<T>           a checked view of a borrowed DLTensor (dtype, rank, dense)
//   HostApi, DeviceBuffer   the host services (write_slots, alloc/free, copy, log)
//   plugin_table<T>()       turns a C++ class into a static specpipe_plugin_table
//   SPECPIPE_SDK_PLUGIN_ENTRY(T)  defines the exported entry point for that class
//
// A plugin class T (see examples/plugins/hello/):
//
//   struct T {
//     static constexpr const char* plugin_name = "hello";    // static strings
//     static constexpr const char* plugin_version = "1.0.0";
//     T(const specpipe::sdk::HostApi&, const specpipe_model_desc&, std::string_view config_json);
//
//     // slot verify_plan: plan() fills it; observe() and forget() are optional.
//     R plan(Span<const specpipe_plan_sequence>, const specpipe_plan_costs&, Span<int32_t> gamma);
//     void observe(Span<const specpipe_plan_observation>);
//     void forget(int64_t sequence);
//
//     // slot kv_write: all four or none.
//     R begin(Span<const specpipe_window>);
//     R stage(const specpipe_layer_rows&, specpipe_stream);
//     R commit(Span<const specpipe_window_verdict>, specpipe_stream);
//     void abort() noexcept;
//
//     std::string metrics() const;  // optional: describe_metrics, a JSON object
//   };
//
// R is void (success) or specpipe_status (e.g. SPECPIPE_DECLINED). To fail with a
// message, throw Error(status, "why"); any other exception becomes SPECPIPE_ERR_INTERNAL
// (std::bad_alloc: SPECPIPE_ERR_CAPACITY). A constructor that refuses its config throws
// Error(SPECPIPE_ERR_CONFIG, ...). observe(), forget() and abort() have no status: what
// they throw is logged through the host as a warning (abort: dropped). The slots the table
// declares follow from the members T has; a class with a partial kv_write set, or no slot,
// does not compile.
//
// Ownership: create() allocates the T (with new, inside a small holder that also keeps
// the HostApi) and destroy() deletes it; between the two the instance belongs to the
// plugin and the host never touches it. Everything a hook receives is borrowed for that
// call only, except the HostApi and the model description, which stay valid until
// destroy() (the constructor may keep the HostApi; copy the model description).
#ifndef SPECPIPE_PLUGIN_HPP_
#define SPECPIPE_PLUGIN_HPP_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "specpipe/plugin.h"

namespace specpipe::sdk {

// ---- errors -------------------------------------------------------------------------

/// Copies the concatenation of `parts` into error[0, error_size), truncated and always
/// NUL-terminated. Does nothing when error is NULL or error_size is 0. Allocates nothing,
/// so it is safe while handling std::bad_alloc.
inline void write_error(char* error, size_t error_size, std::initializer_list<std::string_view> parts) noexcept {
  if (!error || error_size == 0) return;
  size_t used = 0;
  for (std::string_view part : parts) {
    const size_t n = std::min(part.size(), error_size - 1 - used);
    if (n) std::memcpy(error + used, part.data(), n);
    used += n;
  }
  error[used] = '\0';
}

inline void write_error(char* error, size_t error_size, std::string_view message) noexcept {
  write_error(error, error_size, {message});
}

/// Thrown by plugin code to end a hook with `status` and `message`. A status of
/// SPECPIPE_OK is a contradiction and is reported as SPECPIPE_ERR_INTERNAL.
class Error : public std::exception {
 public:
  Error(specpipe_status status, std::string message)
      : status_(status == SPECPIPE_OK ? SPECPIPE_ERR_INTERNAL : status), message_(std::move(message)) {}
  specpipe_status status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  specpipe_status status_;
  std::string message_;
};

/// Throws Error(status, what) unless status is SPECPIPE_OK. For host services' results.
inline void check(specpipe_status status, std::string_view what) {
  if (status != SPECPIPE_OK) throw Error(status, std::string(what) + ": status " + std::to_string(status));
}

/// describe_metrics' convention: copies `json` into buffer (at most size bytes with the
/// NUL) and returns json.size(), the length without the NUL, so a result >= size tells
/// the host the text was truncated and it should call again with a larger buffer.
inline size_t write_metrics(char* buffer, size_t size, std::string_view json) noexcept {
  if (buffer && size > 0) {
    const size_t n = std::min(json.size(), size - 1);
    if (n) std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  }
  return json.size();
}

// ---- borrowed arrays and tensors ----------------------------------------------------

/// A view of `size` elements the host lends for one call (C++17 has no std::span).
template <class T>
class Span {
 public:
  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T& operator[](size_t i) const noexcept { return data_[i]; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

/// The DLPack dtype of a C++ element type.
template <class T>
constexpr DLDataType dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_arithmetic_v<U> && !std::is_same_v<U, bool>, "dtype_of: an arithmetic element type");
  const uint8_t code = std::is_floating_point_v<U> ? kDLFloat : std::is_signed_v<U> ? kDLInt : kDLUInt;
  return DLDataType{code, static_cast<uint8_t>(sizeof(U) * 8), 1};
}

/// A checked view of a borrowed DLTensor: `T` elements (const T for the host's inputs),
/// dense row-major (strides NULL or the compact row-major strides). It owns nothing and
/// is valid only while the tensor is, i.e. for the hook call that lent it. The data
/// pointer is on the tensor's device: dereference it only where that is the CPU.
template <class T>
class TensorView {
 public:
  /// Checks `tensor` (what: its name in messages) and throws
  /// Error(SPECPIPE_ERR_INVALID_ARGUMENT) if it is NULL, not of dtype T, not of rank
  /// `ndim` (any rank if ndim < 0), not dense, or has no data while holding elements.
  static TensorView check(const DLTensor* tensor, std::string_view what, int ndim = -1) {
    const auto bad = [&](std::string_view why) {
      return Error(SPECPIPE_ERR_INVALID_ARGUMENT, std::string(what) + ": " + std::string(why));
    };
    if (!tensor) throw bad("tensor is NULL");
    const DLDataType want = dtype_of<T>();
    if (tensor->dtype.code != want.code || tensor->dtype.bits != want.bits || tensor->dtype.lanes != want.lanes)
      throw bad("dtype (code " + std::to_string(tensor->dtype.code) + ", " + std::to_string(tensor->dtype.bits) +
                " bits, " + std::to_string(tensor->dtype.lanes) + " lanes) is not the expected one (code " +
                std::to_string(want.code) + ", " + std::to_string(want.bits) + " bits)");
    if (tensor->ndim < 0 || (ndim >= 0 && tensor->ndim != ndim))
      throw bad("rank " + std::to_string(tensor->ndim) + ", expected " + std::to_string(ndim));
    if (tensor->ndim > 0 && !tensor->shape) throw bad("shape is NULL");
    int64_t numel = 1, stride = 1;
    for (int i = tensor->ndim - 1; i >= 0; --i) {
      if (tensor->shape[i] < 0) throw bad("negative extent in dimension " + std::to_string(i));
      if (tensor->strides && tensor->shape[i] > 1 && tensor->strides[i] != stride)
        throw bad("not dense row-major (dimension " + std::to_string(i) + ")");
      stride *= tensor->shape[i];
      numel *= tensor->shape[i];
    }
    if (numel > 0 && !tensor->data) throw bad("data is NULL");
    return TensorView(tensor, numel);
  }

  const DLTensor& tensor() const noexcept { return *tensor_; }
  DLDevice device() const noexcept { return tensor_->device; }
  int ndim() const noexcept { return tensor_->ndim; }
  int64_t shape(int dim) const noexcept { return tensor_->shape[dim]; }
  int64_t numel() const noexcept { return numel_; }
  /// The first element (byte_offset applied).
  T* data() const noexcept {
    using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
    return reinterpret_cast<T*>(static_cast<Byte*>(tensor_->data) + tensor_->byte_offset);
  }
  /// Row r of a tensor of rank >= 1: shape(1) * ... elements.
  T* row(int64_t r) const noexcept { return data() + r * (tensor_->ndim > 0 ? numel_ / std::max<int64_t>(tensor_->shape[0], 1) : 0); }

 private:
  TensorView(const DLTensor* tensor, int64_t numel) : tensor_(tensor), numel_(numel) {}
  const DLTensor* tensor_;
  int64_t numel_;
};

// ---- host services ------------------------------------------------------------------

/// Memory on the pool's device from host->alloc_device, returned with free_device when
/// the buffer dies. Move-only. The HostApi it came from must outlive it (it does for an
/// instance's members: the host table stays valid until destroy()).
class DeviceBuffer {
 public:
  DeviceBuffer() noexcept = default;
  DeviceBuffer(const specpipe_host_api* host, void* ptr, size_t bytes) noexcept : host_(host), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : host_(std::exchange(o.host_, nullptr)), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      host_ = std::exchange(o.host_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void reset() noexcept {
    if (ptr_ && host_ && host_->free_device) host_->free_device(host_->host, ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const noexcept { return ptr_; }
  size_t size() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

 private:
  const specpipe_host_api* host_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// The host table given to create(), borrowed: valid until destroy(), so an instance may
/// keep a HostApi (it is a pointer) as a member. Calls forward to the host's services.
class HostApi {
 public:
  enum class Level : int32_t { debug = 0, info = 1, warning = 2, error = 3 };

  explicit HostApi(const specpipe_host_api* api) noexcept : api_(api) {}
  const specpipe_host_api* get() const noexcept { return api_; }

  /// host->write_slots: rows [0, n) of k and v ([n, kv_dim] float32 on the pool's device)
  /// to pool slots `slots`. Returns the host's status (nothing written unless OK).
  specpipe_status write_slots(int32_t layer, const DLTensor& k, const DLTensor& v, Span<const int64_t> slots,
                              specpipe_stream stream) const noexcept {
    if (!api_ || !api_->write_slots) return SPECPIPE_ERR_INVALID_ARGUMENT;
    return api_->write_slots(api_->host, layer, &k, &v, slots.data(), static_cast<int64_t>(slots.size()), stream);
  }

  /// host->alloc_device; throws Error(SPECPIPE_ERR_CAPACITY) when the host has no memory.
  DeviceBuffer alloc(size_t bytes) const {
    if (!api_ || !api_->alloc_device || !api_->free_device)
      throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "the host offers no alloc_device/free_device");
    void* p = api_->alloc_device(api_->host, bytes);
    if (!p) throw Error(SPECPIPE_ERR_CAPACITY, "alloc_device(" + std::to_string(bytes) + " bytes) failed");
    return DeviceBuffer(api_, p, bytes);
  }

  /// host->copy between device buffers, ordered on `stream`.
  specpipe_status copy(void* dst, const void* src, size_t bytes, specpipe_stream stream) const noexcept {
    if (!api_ || !api_->copy) return SPECPIPE_ERR_INVALID_ARGUMENT;
    return api_->copy(api_->host, dst, src, bytes, stream);
  }

  /// host->log; drops the message if the host has no log or memory runs out.
  void log(Level level, std::string_view message) const noexcept {
    if (!api_ || !api_->log) return;
    try {
      const std::string text(message);
      api_->log(api_->host, static_cast<int32_t>(level), text.c_str());
    } catch (...) {
    }
  }

 private:
  const specpipe_host_api* api_;
};

// ---- the table ----------------------------------------------------------------------

namespace detail {

template <class T, class = void>
struct has_plan : std::false_type {};
template <class T>
struct has_plan<T, std::void_t<decltype(std::declval<T&>().plan(std::declval<Span<const specpipe_plan_sequence>>(),
                                                                std::declval<const specpipe_plan_costs&>(),
                                                                std::declval<Span<int32_t>>()))>> : std::true_type {};
template <class T, class = void>
struct has_observe : std::false_type {};
template <class T>
struct has_observe<T, std::void_t<decltype(std::declval<T&>().observe(std::declval<Span<const specpipe_plan_observation>>()))>>
    : std::true_type {};
template <class T, class = void>
struct has_forget : std::false_type {};
template <class T>
struct has_forget<T, std::void_t<decltype(std::declval<T&>().forget(int64_t{}))>> : std::true_type {};
template <class T, class = void>
struct has_begin : std::false_type {};
template <class T>
struct has_begin<T, std::void_t<decltype(std::declval<T&>().begin(std::declval<Span<const specpipe_window>>()))>>
    : std::true_type {};
template <class T, class = void>
struct has_stage : std::false_type {};
template <class T>
struct has_stage<T, std::void_t<decltype(std::declval<T&>().stage(std::declval<const specpipe_layer_rows&>(),
                                                                  specpipe_stream{}))>> : std::true_type {};
template <class T, class = void>
struct has_commit : std::false_type {};
template <class T>
struct has_commit<T, std::void_t<decltype(std::declval<T&>().commit(std::declval<Span<const specpipe_window_verdict>>(),
                                                                    specpipe_stream{}))>> : std::true_type {};
template <class T, class = void>
struct has_abort : std::false_type {};
template <class T>
struct has_abort<T, std::void_t<decltype(std::declval<T&>().abort())>> : std::true_type {};
template <class T, class = void>
struct has_metrics : std::false_type {};
template <class T>
struct has_metrics<T, std::void_t<decltype(std::string_view(std::declval<const T&>().metrics()))>> : std::true_type {};

/// Runs `body` (returning void or a specpipe_status) and maps every exception to a status
/// and a message "<prefix>: <what>" in the error buffer. The prefix is the plugin's name
/// (the host adds the hook's: "plan: hello: ...").
template <class Body>
specpipe_status guarded(const char* prefix, char* error, size_t error_size, Body&& body) noexcept {
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      return SPECPIPE_OK;
    } else {
      return static_cast<specpipe_status>(body());
    }
  } catch (const Error& e) {
    write_error(error, error_size, {prefix, ": ", e.what()});
    return e.status();
  } catch (const std::bad_alloc&) {
    write_error(error, error_size, {prefix, ": out of memory"});
    return SPECPIPE_ERR_CAPACITY;
  } catch (const std::exception& e) {
    write_error(error, error_size, {prefix, ": internal error: ", e.what()});
    return SPECPIPE_ERR_INTERNAL;
  } catch (...) {
    write_error(error, error_size, {prefix, ": internal error (unknown exception)"});
    return SPECPIPE_ERR_INTERNAL;
  }
}

/// A borrowed array from the host: count >= 0, data non-NULL when count > 0.
template <class E>
Span<E> borrowed(E* data, int32_t count, const char* what) {
  if (count < 0) throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, std::string(what) + ": count " + std::to_string(count) + " < 0");
  if (count > 0 && !data) throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  return Span<E>(data, static_cast<size_t>(count));
}

/// What create() allocates and the host holds as the opaque instance: the plugin object
/// and the host table, so that hooks without a status (observe, forget) can log failures.
template <class T>
struct Holder {
  Holder(const specpipe_host_api* api, const specpipe_model_desc& model, std::string_view config)
      : host(api), plugin(host, model, config) {}
  HostApi host;
  T plugin;
};

template <class T>
Holder<T>& holder(void* instance) {
  if (!instance) throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "the instance is NULL");
  return *static_cast<Holder<T>*>(instance);
}

template <class T>
T& self(void* instance) {
  return holder<T>(instance).plugin;
}

template <class T>
struct Trampolines {
  static constexpr bool kv_write = has_begin<T>::value || has_stage<T>::value || has_commit<T>::value ||
                                   has_abort<T>::value;
  static constexpr bool verify_plan = has_plan<T>::value;
  static_assert(!kv_write || (has_begin<T>::value && has_stage<T>::value && has_commit<T>::value && has_abort<T>::value),
                "slot kv_write needs begin(Span<const specpipe_window>), stage(const specpipe_layer_rows&, "
                "specpipe_stream), commit(Span<const specpipe_window_verdict>, specpipe_stream) and abort()");
  static_assert(kv_write || verify_plan, "a plugin class must fill a slot: define plan() or the kv_write hooks");
  static_assert(verify_plan || (!has_observe<T>::value && !has_forget<T>::value),
                "observe() and forget() belong to slot verify_plan, which needs plan()");
  static_assert(std::is_constructible_v<T, const HostApi&, const specpipe_model_desc&, std::string_view>,
                "a plugin class needs a constructor T(const HostApi&, const specpipe_model_desc&, std::string_view)");

  static specpipe_status create(const specpipe_host_api* host, const specpipe_model_desc* model,
                                const char* config_json, void** instance, char* error, size_t error_size) noexcept {
    return guarded(T::plugin_name, error, error_size, [&] {
      if (!instance) throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "instance is NULL");
      *instance = nullptr;
      if (!host || host->abi_version != SPECPIPE_PLUGIN_ABI_VERSION || host->struct_size < sizeof(specpipe_host_api))
        throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "the host table is missing or of another ABI");
      if (!model || model->struct_size < sizeof(specpipe_model_desc))
        throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "the model description is missing or too small");
      *instance = new Holder<T>(host, *model, std::string_view(config_json ? config_json : ""));
    });
  }

  static void destroy(void* instance) noexcept { delete static_cast<Holder<T>*>(instance); }

  static size_t describe_metrics(void* instance, char* buffer, size_t size) noexcept {
    if constexpr (has_metrics<T>::value) {
      try {
        if (!instance) return write_metrics(buffer, size, "{}");
        const auto& text = std::as_const(static_cast<Holder<T>*>(instance)->plugin).metrics();
        return write_metrics(buffer, size, std::string_view(text));
      } catch (...) {
        return write_metrics(buffer, size, "{}");
      }
    } else {
      (void)instance;
      return write_metrics(buffer, size, "{}");
    }
  }

  // slot verify_plan
  static specpipe_status plan(void* instance, const specpipe_plan_sequence* sequences, int32_t count,
                              const specpipe_plan_costs* costs, int32_t* gamma, char* error, size_t error_size) noexcept {
    if constexpr (has_plan<T>::value) {
      return guarded(T::plugin_name, error, error_size, [&] {
        T& t = self<T>(instance);
        const auto in = borrowed(sequences, count, "sequences");
        const auto out = borrowed(gamma, count, "gamma");
        if (!costs) throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "costs is NULL");
        return t.plan(in, *costs, out);
      });
    } else {
      (void)instance, (void)sequences, (void)count, (void)costs, (void)gamma, (void)error, (void)error_size;
      return SPECPIPE_ERR_INTERNAL;
    }
  }
  /// observe() and forget() return no status: a failure is logged as a warning through
  /// the host ("plugin <name>: observe: <what>") and otherwise dropped (the instance stays
  /// enabled).
  static void log_failure(void* instance, const char* error) noexcept {
    if (instance) static_cast<Holder<T>*>(instance)->host.log(HostApi::Level::warning, error);
  }
  static void observe(void* instance, const specpipe_plan_observation* observations, int32_t count) noexcept {
    if constexpr (has_observe<T>::value) {
      char error[256] = {};
      if (guarded("observe", error, sizeof error,
                  [&] { self<T>(instance).observe(borrowed(observations, count, "observations")); }) != SPECPIPE_OK)
        log_failure(instance, error);
    } else {
      (void)instance, (void)observations, (void)count;
    }
  }
  static void forget(void* instance, int64_t sequence) noexcept {
    if constexpr (has_forget<T>::value) {
      char error[256] = {};
      if (guarded("forget", error, sizeof error, [&] { self<T>(instance).forget(sequence); }) !=
          SPECPIPE_OK)
        log_failure(instance, error);
    } else {
      (void)instance, (void)sequence;
    }
  }

  // slot kv_write
  static specpipe_status begin(void* instance, const specpipe_window* windows, int32_t count, char* error,
                               size_t error_size) noexcept {
    if constexpr (kv_write) {
      return guarded(T::plugin_name, error, error_size,
                     [&] { return self<T>(instance).begin(borrowed(windows, count, "windows")); });
    } else {
      (void)instance, (void)windows, (void)count, (void)error, (void)error_size;
      return SPECPIPE_ERR_INTERNAL;
    }
  }
  static specpipe_status stage(void* instance, const specpipe_layer_rows* rows, specpipe_stream stream, char* error,
                               size_t error_size) noexcept {
    if constexpr (kv_write) {
      return guarded(T::plugin_name, error, error_size, [&] {
        if (!rows) throw Error(SPECPIPE_ERR_INVALID_ARGUMENT, "rows is NULL");
        return self<T>(instance).stage(*rows, stream);
      });
    } else {
      (void)instance, (void)rows, (void)stream, (void)error, (void)error_size;
      return SPECPIPE_ERR_INTERNAL;
    }
  }
  static specpipe_status commit(void* instance, const specpipe_window_verdict* verdicts, int32_t count,
                                specpipe_stream stream, char* error, size_t error_size) noexcept {
    if constexpr (kv_write) {
      return guarded(T::plugin_name, error, error_size,
                     [&] { return self<T>(instance).commit(borrowed(verdicts, count, "verdicts"), stream); });
    } else {
      (void)instance, (void)verdicts, (void)count, (void)stream, (void)error, (void)error_size;
      return SPECPIPE_ERR_INTERNAL;
    }
  }
  static void abort(void* instance) noexcept {
    if constexpr (kv_write) {
      if (!instance) return;
      try {
        static_cast<Holder<T>*>(instance)->plugin.abort();
      } catch (...) {  // abort cannot fail; a throwing one is ignored
      }
    } else {
      (void)instance;
    }
  }

  static constexpr specpipe_verify_plan_hooks verify_plan_hooks = {
      &plan, has_observe<T>::value ? &observe : nullptr, has_forget<T>::value ? &forget : nullptr};
  static constexpr specpipe_kv_write_hooks kv_write_hooks = {&begin, &stage, &commit, &abort};
  static constexpr const char* slots = kv_write && verify_plan ? "kv_write,verify_plan"
                                       : kv_write              ? "kv_write"
                                                               : "verify_plan";
  static constexpr specpipe_plugin_table table = {
      SPECPIPE_PLUGIN_ABI_VERSION,
      sizeof(specpipe_plugin_table),
      T::plugin_name,
      T::plugin_version,
      slots,
      &create,
      &destroy,
      has_metrics<T>::value ? &describe_metrics : nullptr,
      kv_write ? &kv_write_hooks : nullptr,
      verify_plan ? &verify_plan_hooks : nullptr,
      nullptr,  // verify_view (ABI 1.1): not wrapped here yet; write it against plugin.h
  };
};

}  // namespace detail

/// The static table for plugin class T, or NULL when the host speaks another ABI version.
/// The table and its hook structs are constant data with static storage: return the
/// pointer from specpipe_plugin_entry as is.
template <class T>
const specpipe_plugin_table* plugin_table(uint32_t host_abi_version) noexcept {
  return host_abi_version == SPECPIPE_PLUGIN_ABI_VERSION ? &detail::Trampolines<T>::table : nullptr;
}

}  // namespace specpipe::sdk

/// Defines the one exported symbol of a plugin library for plugin class T. Use it once,
/// at namespace scope, in one source file of the library.
#define SPECPIPE_SDK_PLUGIN_ENTRY(T)                                                                         \
  extern "C" SPECPIPE_PLUGIN_EXPORT const specpipe_plugin_table* specpipe_plugin_entry(uint32_t host_abi_version) { \
    return ::specpipe::sdk::plugin_table<T>(host_abi_version);                                                \
  }

#endif  // SPECPIPE_PLUGIN_HPP_
