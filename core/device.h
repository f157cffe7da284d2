#pragma once
/// Devices, streams and events: the ordering vocabulary shared by the CPU and CUDA
/// backends (ARCHITECTURE.md section 4).
///
/// A Stream is an ordered queue of work on one device. An Event marks a point in a
/// stream's work; another stream can be made to wait for it without blocking the host.
/// On the CPU, work runs synchronously when issued, so an event is complete as soon as
/// it is recorded and waiting on it is free. A backend with real asynchronous streams
/// (CUDA) supplies its own EventImpl.
#include <cstdint>
#include <memory>
#include <string>

namespace specpipe {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  /// "cpu", "cuda", "cuda:1". Throws Error(invalid_argument) for anything else.
  static Device parse(const std::string& text);
  std::string to_string() const;
  bool operator==(const Device&) const = default;
};

/// An ordered queue of work. The CPU stream is a tag: its work is already done when the
/// call that issued it returns. `native` is the backend's handle (cudaStream_t).
struct Stream {
  Device device;
  void* native = nullptr;
};

/// Backend half of an event.
class EventImpl {
 public:
  virtual ~EventImpl() = default;
  /// Makes `waiter` wait (on the device) until the recorded work has completed.
  virtual void wait_on(const Stream& waiter) const = 0;
  /// Blocks the host until the recorded work has completed.
  virtual void synchronize() const = 0;
  virtual bool query() const = 0;
};

/// A point in a stream's work, cheap to copy (shared handle). Default-constructed and
/// CPU events are complete.
class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<const EventImpl> impl) : impl_(std::move(impl)) {}

  /// Records the current end of `stream`'s work. CPU streams: a complete event.
  static Event record(const Stream& stream);

  void wait_on(const Stream& waiter) const {
    if (impl_) impl_->wait_on(waiter);
  }
  void synchronize() const {
    if (impl_) impl_->synchronize();
  }
  bool complete() const { return !impl_ || impl_->query(); }
  /// The same recorded point (copies of one Event).
  bool same(const Event& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<const EventImpl> impl_;
};

/// How a backend records events on its streams; registered once by the backend
/// (the CUDA backend on load). Without one, only CPU streams exist.
using EventRecorder = Event (*)(const Stream& stream);
void register_event_recorder(DeviceKind kind, EventRecorder recorder);

/// Token ids produced on a device, not copied to the host: id i is ids[i * stride], in the
/// memory of `device` (cpu: host memory), once `ready` is complete. Another stream reads
/// them after waiting for `ready`; how long they stay valid is the producer's to say.
struct DeviceIds {
  const int32_t* ids = nullptr;  ///< null: none
  int32_t stride = 1;
  Device device;
  Event ready;
};

/// Float rows produced on a device, not copied to the host (a sampled draft chain's q
/// rows): row i starts at data + i * stride, in the memory of `device`, once `ready` is
/// complete. As DeviceIds, the producer says how long they stay valid.
struct DeviceRows {
  const float* data = nullptr;  ///< null: none
  int64_t stride = 0;           ///< floats from one row to the next
  Device device;
  Event ready;
};

}  // namespace specpipe
