// The pending-event set: a binary heap ordered by (time, sequence number), so that events at
// the same instant run in the order they were scheduled. Cancellation by generation counter.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/core/time.h"

namespace hetsim {

using Callback = std::function<void()>;

struct EventId {
  uint32_t slot = UINT32_MAX;
  uint32_t generation = 0;
  bool valid() const { return slot != UINT32_MAX; }
};

class EventQueue {
 public:
  EventId push(Time t, Callback cb);
  // Returns false when the event already ran or was cancelled.
  bool cancel(EventId id);
  bool empty() const { return live_ == 0; }
  size_t size() const { return live_; }
  // Time of the earliest live event; the queue must not be empty.
  Time next_time();
  // Removes the earliest live event and returns its time and callback.
  std::pair<Time, Callback> pop();

 private:
  struct Entry {
    Time time;
    uint64_t seq;
    uint32_t slot;
    uint32_t generation;
  };
  struct Slot {
    Callback cb;
    uint32_t generation = 0;
  };
  static bool later(const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
  void drop_dead_top();
  void release(uint32_t slot);

  std::vector<Entry> heap_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  uint64_t next_seq_ = 0;
  size_t live_ = 0;
};

}  // namespace hetsim
