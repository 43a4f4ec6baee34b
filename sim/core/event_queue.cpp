// Binary-heap event queue; see event_queue.h.
#include "sim/core/event_queue.h"

#include <algorithm>
#include <cassert>

namespace hetsim {

EventId EventQueue::push(Time t, Callback cb) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot].cb = std::move(cb);
  const uint32_t gen = slots_[slot].generation;
  heap_.push_back(Entry{t, next_seq_++, slot, gen});
  std::push_heap(heap_.begin(), heap_.end(), later);
  ++live_;
  return EventId{slot, gen};
}

void EventQueue::release(uint32_t slot) {
  slots_[slot].cb = nullptr;
  ++slots_[slot].generation;
  free_slots_.push_back(slot);
}

bool EventQueue::cancel(EventId id) {
  if (!id.valid() || id.slot >= slots_.size() || slots_[id.slot].generation != id.generation) {
    return false;
  }
  release(id.slot);
  --live_;
  return true;
}

void EventQueue::drop_dead_top() {
  while (!heap_.empty() && slots_[heap_.front().slot].generation != heap_.front().generation) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
  }
}

Time EventQueue::next_time() {
  drop_dead_top();
  assert(!heap_.empty());
  return heap_.front().time;
}

std::pair<Time, Callback> EventQueue::pop() {
  drop_dead_top();
  assert(!heap_.empty());
  std::pop_heap(heap_.begin(), heap_.end(), later);
  const Entry e = heap_.back();
  heap_.pop_back();
  Callback cb = std::move(slots_[e.slot].cb);
  release(e.slot);
  --live_;
  return {e.time, std::move(cb)};
}

}  // namespace hetsim
