// Google Benchmark: events per second of the flow model under churn: flows start and end on
// shared links, each change a max-min recomputation of the flows it touches.
#include <benchmark/benchmark.h>

#include "sim/network/flow_network.h"

namespace {

// The benchmarks' random stream (xorshift64): the same flows on every run.
void xorshift(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
}

// `concurrent` flows at all times, each over 4 random links of `links`; `groups` splits the
// links into that many disjoint sets (flows stay inside one), as communicators do.
void churn(benchmark::State& state, uint32_t links, uint32_t groups) {
  const int concurrent = static_cast<int>(state.range(0));
  constexpr int kFlows = 20000;
  for (auto _ : state) {
    hetsim::Engine engine;
    hetsim::network::FlowNetwork net(engine, std::vector<double>(links, 25e9));
    uint64_t x = 0x2545F4914F6CDD1DULL;
    int budget = kFlows;
    std::function<void()> spawn = [&] {
      if (--budget <= 0) return;
      xorshift(x);
      const uint32_t per = links / groups;
      const uint32_t base = static_cast<uint32_t>(x >> 40) % groups * per;
      hetsim::network::FlowSpec s;
      for (int h = 0; h < 4; ++h) {
        s.links.push_back({base + static_cast<uint32_t>((x >> (8 * h)) % per), 1});
      }
      s.bytes = 1e6 + static_cast<double>(x % 1000000);
      s.on_done = [&spawn] { spawn(); };
      net.start(std::move(s));
    };
    for (int i = 0; i < concurrent; ++i) spawn();
    engine.run();
    state.counters["events/s"] = benchmark::Counter(static_cast<double>(engine.events_executed()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
    state.counters["flows/s"] =
        benchmark::Counter(kFlows, benchmark::Counter::kIsIterationInvariantRate);
  }
}

// Folded replicas' flows: 16 concurrent flows over 4 of 64 links, each also crossing the same
// links in `copies - 1` mirrored sets of 64 (every replica's copy of a transfer). Links crossed by
// the same flows are one constraint, so the rate computation stays that of 64 links; what grows
// with the copies is reading the links.
void BM_FlowChurnFolded(benchmark::State& state) {
  const uint32_t copies = static_cast<uint32_t>(state.range(0));
  constexpr uint32_t kLinks = 64;
  constexpr int kFlows = 5000;
  for (auto _ : state) {
    hetsim::Engine engine;
    hetsim::network::FlowNetwork net(engine, std::vector<double>(kLinks * copies, 25e9));
    uint64_t x = 0x2545F4914F6CDD1DULL;
    int budget = kFlows;
    std::function<void()> spawn = [&] {
      if (--budget <= 0) return;
      xorshift(x);
      hetsim::network::FlowSpec s;
      for (int h = 0; h < 4; ++h) {
        const uint32_t l = static_cast<uint32_t>((x >> (8 * h)) % kLinks);
        for (uint32_t c = 0; c < copies; ++c) s.links.push_back({l + c * kLinks, 1});
      }
      s.bytes = 1e6 + static_cast<double>(x % 1000000);
      s.on_done = [&spawn] { spawn(); };
      net.start(std::move(s));
    };
    for (int i = 0; i < 16; ++i) spawn();
    engine.run();
    state.counters["flows/s"] =
        benchmark::Counter(kFlows, benchmark::Counter::kIsIterationInvariantRate);
  }
}

void BM_FlowChurnShared(benchmark::State& state) { churn(state, 256, 1); }
void BM_FlowChurnGroups(benchmark::State& state) { churn(state, 4096, 256); }
BENCHMARK(BM_FlowChurnShared)->Arg(16)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FlowChurnGroups)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FlowChurnFolded)->Arg(1)->Arg(32)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace
