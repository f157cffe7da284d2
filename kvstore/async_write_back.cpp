#include "kvstore/async_write_back.h"

#include <utility>

namespace specpipe {

WriteBackQueue::WriteBackQueue(std::shared_ptr<CopyStream> stream) : stream_(std::move(stream)) {}

void WriteBackQueue::to_host(const KvTensors& pool, HostKvTier& tier, int32_t pool_block, int32_t host_block) {
  const CopyStream::Ticket t = stream_->enqueue(
      [&pool, &tier, pool_block, host_block] { copy_block_to_host(pool, tier, pool_block, host_block); });
  last_.store(t);
  blocks_.fetch_add(1);
}

void WriteBackQueue::drain() {
  const CopyStream::Ticket t = last_.load();
  if (t > 0 && stream_->wait(t)) count_stall();
}

namespace {
/// Held only by the store's copier: the store's end drains the copies that read its pool.
struct DrainAtEnd {
  std::shared_ptr<WriteBackQueue> queue;
  ~DrainAtEnd() {
    try {
      if (queue) queue->drain();
    } catch (...) {  // a copy's error has no reader left; the memory is what matters here
    }
  }
};
}  // namespace

HostTierCopier async_host_copier(std::shared_ptr<WriteBackQueue> queue, const KvTensors& pool, HostKvTier& tier) {
  auto held = std::make_shared<DrainAtEnd>(DrainAtEnd{std::move(queue)});
  HostTierCopier c;
  c.to_host = [held, &pool, &tier](int32_t pool_block, int32_t host_block) {
    held->queue->to_host(pool, tier, pool_block, host_block);
  };
  c.before_pool_write = [held] { held->queue->drain(); };
  return c;
}

}  // namespace specpipe
