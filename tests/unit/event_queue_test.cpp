// The event queue orders by (time, sequence number) and cancels by generation.
#include "sim/core/event_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace hetsim {
namespace {

TEST(EventQueue, PopsInTimeOrder) {
  EventQueue q;
  std::vector<int> order;
  q.push(Time::ns(30), [&] { order.push_back(3); });
  q.push(Time::ns(10), [&] { order.push_back(1); });
  q.push(Time::ns(20), [&] { order.push_back(2); });
  while (!q.empty()) q.pop().second();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(EventQueue, EqualTimesRunInSchedulingOrder) {
  EventQueue q;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) q.push(Time::ns(5), [&order, i] { order.push_back(i); });
  while (!q.empty()) q.pop().second();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(EventQueue, CancelledEventNeverRuns) {
  EventQueue q;
  bool ran = false;
  const EventId id = q.push(Time::ns(1), [&] { ran = true; });
  q.push(Time::ns(2), [] {});
  EXPECT_TRUE(q.cancel(id));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.next_time(), Time::ns(2));
  while (!q.empty()) q.pop().second();
  EXPECT_FALSE(ran);
}

TEST(EventQueue, CancelAfterRunOrTwiceReturnsFalseEvenWhenSlotIsReused) {
  EventQueue q;
  const EventId a = q.push(Time::ns(1), [] {});
  q.pop();
  bool ran = false;
  q.push(Time::ns(2), [&] { ran = true; });  // reuses a's slot with a new generation
  EXPECT_FALSE(q.cancel(a));
  q.pop().second();
  EXPECT_TRUE(ran);
  EXPECT_FALSE(q.cancel(EventId{}));
}

}  // namespace
}  // namespace hetsim
