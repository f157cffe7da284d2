#pragma once
/// Where a round's time between the actors goes (RoundTimes::queued_ms): each
/// stage (draft, kv-router, verifier, scheduler) keeps a StageClock. The sender stamps
/// the round when it sends it on (leave); the receiver, when its handler starts (arrive),
/// splits the time since into the part its actor was still busy with earlier work
/// (queued: another micro-batch's round, an admission batch) and the rest (the hop).
/// With one micro-batch a round never waits for another, so nearly all of it is hops.
#include <algorithm>
#include <chrono>
#include <cstdint>

#include "actors/messages.h"

namespace specpipe::actors {

class StageClock {
 public:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  /// The stage's handler for `t`'s round starts now.
  void arrive(RoundTimes& t) const {
    if (t.sent_ns == 0) return;
    const int64_t now = now_ns();
    const int64_t waited = std::max<int64_t>(0, now - t.sent_ns);
    t.queued_ms += static_cast<double>(std::clamp<int64_t>(busy_until_ - t.sent_ns, 0, waited)) * 1e-6;
  }
  /// The round goes on now (its sender's stamp).
  static void leave(RoundTimes& t) { t.sent_ns = now_ns(); }
  /// Work of this stage ended now: a message that arrived meanwhile waited for it.
  void busy_until_now() { busy_until_ = now_ns(); }
  /// Time a round was held back by this stage (the kv-router's store lent), queued.
  static void held(RoundTimes& t, int64_t since_ns) {
    t.queued_ms += static_cast<double>(std::max<int64_t>(0, now_ns() - since_ns)) * 1e-6;
  }

 private:
  int64_t busy_until_ = 0;
};

}  // namespace specpipe::actors
