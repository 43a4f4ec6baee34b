// The engine advances its clock event by event, refuses the past and reports to observers.
#include "sim/core/engine.h"

#include <gtest/gtest.h>

#include "sim/core/error.h"

namespace hetsim {
namespace {

TEST(Engine, ClockIsTheTimeOfTheRunningEvent) {
  Engine e;
  std::vector<int64_t> seen;
  e.schedule_at(Time::ns(7), [&] {
    seen.push_back(e.now().ps());
    e.schedule_in(Time::ns(3), [&] { seen.push_back(e.now().ps()); });
  });
  e.run();
  EXPECT_EQ(seen, (std::vector<int64_t>{7000, 10000}));
  EXPECT_EQ(e.events_executed(), 2u);
}

TEST(Engine, SchedulingInThePastIsAnError) {
  Engine e;
  e.schedule_at(Time::ns(10), [&] { EXPECT_THROW(e.schedule_at(Time::ns(9), [] {}), RunError); });
  e.run();
}

TEST(Engine, RunUntilStopsAtTheLimitInclusive) {
  Engine e;
  int ran = 0;
  for (int t = 1; t <= 5; ++t) e.schedule_at(Time::ns(t), [&] { ++ran; });
  e.run_until(Time::ns(3));
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(e.pending(), 2u);
}

TEST(Engine, ObserversSeeEveryEvent) {
  struct Counter : EngineObserver {
    int n = 0;
    void on_event(Time) override { ++n; }
  } counter;
  Engine e;
  e.add_observer(&counter);
  for (int t = 0; t < 4; ++t) e.schedule_at(Time::ns(t), [] {});
  e.run();
  EXPECT_EQ(counter.n, 4);
}

TEST(Engine, TwoEnginesAreIndependent) {
  Engine a, b;
  a.schedule_at(Time::ns(5), [] {});
  b.schedule_at(Time::ns(50), [] {});
  a.run();
  EXPECT_EQ(a.now(), Time::ns(5));
  EXPECT_EQ(b.now(), Time());
  b.run();
  EXPECT_EQ(b.now(), Time::ns(50));
}

}  // namespace
}  // namespace hetsim
