#pragma once
/// Tensors as they cross module and actor boundaries: a non-owning TensorView
/// (DLPack-compatible) and a TensorHandle that owns a reference to its buffer and
/// carries the event after which its contents are valid (ARCHITECTURE.md section 4).
#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace specpipe {

/// Memory on one device, freed by its owner when the last reference goes.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  virtual Device device() const = 0;

  /// 64-byte aligned host memory.
  static std::shared_ptr<Buffer> host(size_t bytes);
};

/// A dense row-major view; owns nothing.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  Device device;

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  /// The DLPack description of this view. `shape` must outlive the DLTensor.
  DLTensor to_dlpack();
};

/// What an actor message carries: the tensor's buffer (kept alive by this handle, on
/// any thread), where the tensor sits in it, and the event recorded on the producer's
/// stream after the producing work.
struct TensorHandle {
  std::shared_ptr<Buffer> buffer;
  size_t offset = 0;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  Event ready;

  /// Allocates a host tensor (its event is complete).
  static TensorHandle host(DType dtype, std::vector<int64_t> shape);

  /// The view, for work issued on `consumer` after this call: makes the consumer's
  /// stream wait for the producer's event first (never blocks the host).
  TensorView acquire(const Stream& consumer) const;
  /// The view without ordering: only for the producer, before it records `ready`.
  TensorView view() const;
  bool empty() const { return !buffer; }
};

DLDataType to_dlpack(DType dtype);

}  // namespace specpipe
