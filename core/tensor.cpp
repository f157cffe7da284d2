#include "core/tensor.h"

#include <cstdlib>

#include "core/error.h"

namespace specpipe {
namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!data_) fail(ErrorCode::out_of_capacity, "cannot allocate {} bytes of host memory", bytes);
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return {}; }

 private:
  void* data_;
  size_t bytes_;
};

}  // namespace

std::shared_ptr<Buffer> Buffer::host(size_t bytes) { return std::make_shared<HostBuffer>(bytes); }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

DLDataType to_dlpack(DType dtype) {
  switch (dtype) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
  }
  return {kDLFloat, 32, 1};
}

DLTensor TensorView::to_dlpack() {
  DLTensor t{};
  t.data = data;
  t.device = {device.kind == DeviceKind::cpu ? kDLCPU : kDLCUDA, device.index};
  t.ndim = static_cast<int>(shape.size());
  t.dtype = specpipe::to_dlpack(dtype);
  t.shape = shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  return t;
}

TensorHandle TensorHandle::host(DType dtype, std::vector<int64_t> shape) {
  TensorHandle h;
  h.dtype = dtype;
  h.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : h.shape) n *= d;
  h.buffer = Buffer::host(static_cast<size_t>(n) * dtype_size(dtype));
  return h;
}

TensorView TensorHandle::view() const {
  if (!buffer) fail(ErrorCode::invalid_argument, "view of an empty tensor handle");
  return {static_cast<std::byte*>(buffer->data()) + offset, dtype, shape, buffer->device()};
}

TensorView TensorHandle::acquire(const Stream& consumer) const {
  ready.wait_on(consumer);
  return view();
}

}  // namespace specpipe
