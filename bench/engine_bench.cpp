// Google Benchmark: events per second of the bare event queue and engine.
#include <benchmark/benchmark.h>

#include "sim/core/engine.h"

namespace {

// A steady population of `pending` events; each one schedules its successor at a pseudo-random
// later time, as a simulation with that many concurrent activities does. The callback is one
// pointer, so std::function stores it without allocating, as the simulator's callbacks do.
void BM_EngineEvents(benchmark::State& state) {
  const int64_t pending = state.range(0);
  constexpr int64_t kEvents = 1'000'000;
  for (auto _ : state) {
    hetsim::Engine engine;
    struct Ticker {
      hetsim::Engine& engine;
      uint64_t x = 88172645463325252ULL;
      int64_t budget = kEvents;
      void tick() {
        if (--budget <= 0) return;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        engine.schedule_in(hetsim::Time::ps(static_cast<int64_t>(x % 1000000)), [this] { tick(); });
      }
    } ticker{engine};
    for (int64_t i = 0; i < pending; ++i) {
      engine.schedule_in(hetsim::Time::ps(i), [&ticker] { ticker.tick(); });
    }
    engine.run();
    benchmark::DoNotOptimize(engine.events_executed());
    state.counters["events/s"] = benchmark::Counter(static_cast<double>(engine.events_executed()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
  }
}
BENCHMARK(BM_EngineEvents)->Arg(16)->Arg(1024)->Arg(65536)->Unit(benchmark::kMillisecond);

}  // namespace
