// Google Benchmark: events per second of the flow model under churn (flows starting and ending
// on shared links, each change a max-min recomputation).
#include <benchmark/benchmark.h>

#include "sim/network/flow_network.h"

namespace {

void BM_FlowChurn(benchmark::State& state) {
  const int concurrent = static_cast<int>(state.range(0));
  const uint32_t links = 256;
  for (auto _ : state) {
    hetsim::Engine engine;
    hetsim::network::FlowNetwork net(engine, std::vector<double>(links, 25e9));
    uint64_t x = 0x2545F4914F6CDD1DULL;
    int budget = 20000;
    std::function<void()> spawn = [&] {
      if (--budget <= 0) return;
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      hetsim::network::FlowSpec s;
      for (int h = 0; h < 4; ++h) {
        s.links.push_back({static_cast<uint32_t>((x >> (8 * h)) % links), 1});
      }
      s.bytes = 1e6 + static_cast<double>(x % 1000000);
      s.on_done = spawn;
      net.start(std::move(s));
    };
    for (int i = 0; i < concurrent; ++i) spawn();
    engine.run();
    state.counters["events/s"] = benchmark::Counter(static_cast<double>(engine.events_executed()),
                                                    benchmark::Counter::kIsRate);
    state.counters["flows/s"] = benchmark::Counter(20000, benchmark::Counter::kIsRate);
  }
}
BENCHMARK(BM_FlowChurn)->Arg(16)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond);

}  // namespace
