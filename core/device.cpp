#include "core/device.h"

#include <array>
#include <atomic>
#include <charconv>

#include "core/error.h"

namespace specpipe {
namespace {
std::array<std::atomic<EventRecorder>, 2> g_recorders{};
}  // namespace

Device Device::parse(const std::string& text) {
  if (text == "cpu") return {DeviceKind::cpu, 0};
  if (text == "cuda") return {DeviceKind::cuda, 0};
  if (text.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && ptr == last && first != last && index >= 0) return {DeviceKind::cuda, index};
  }
  fail(ErrorCode::invalid_argument, "unknown device '{}' (expected cpu, cuda or cuda:N)", text);
}

std::string Device::to_string() const {
  return kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

void register_event_recorder(DeviceKind kind, EventRecorder recorder) {
  g_recorders[static_cast<size_t>(kind)].store(recorder);
}

Event Event::record(const Stream& stream) {
  if (stream.device.kind == DeviceKind::cpu) return Event{};
  const EventRecorder recorder = g_recorders[static_cast<size_t>(stream.device.kind)].load();
  if (!recorder)
    fail(ErrorCode::unsupported, "no event recorder for {}: the backend is not built in",
         stream.device.to_string());
  return recorder(stream);
}

}  // namespace specpipe
