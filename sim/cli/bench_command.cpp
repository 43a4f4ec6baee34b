// `hetsim bench`: wall time and peak memory of large simulations, each case in its own child
// process so that its peak resident memory is its own.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "sim/cli/commands.h"
#include "sim/config/units.h"
#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/report/collective_report.h"

namespace hetsim::cli {

namespace {

struct CaseResult {
  double wall_s = 0;
  double sim_s = 0;
  double busbw = 0;
  long peak_kib = 0;
  char algorithm[32] = {};
};

// Runs `work` in a child; returns its wall time (measured inside), result and peak RSS.
CaseResult run_isolated(const std::function<CaseResult()>& work) {
  int fds[2];
  if (pipe(fds) != 0) throw RunError("bench: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw RunError("bench: fork failed");
  if (pid == 0) {
    close(fds[0]);
    int code = 0;
    CaseResult r;
    try {
      r = work();
    } catch (const std::exception& e) {
      std::cerr << "bench: " << e.what() << "\n";
      code = 1;
    }
    if (write(fds[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) code = 1;
    close(fds[1]);
    _exit(code);
  }
  close(fds[1]);
  CaseResult r;
  const ssize_t got = read(fds[0], &r, sizeof r);
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  if (got != static_cast<ssize_t>(sizeof r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw RunError("bench: a case failed");
  }
  r.peak_kib = usage.ru_maxrss;
  return r;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  struct Opts {
    std::vector<int> gpus{1024, 8192};
    std::string bytes = "1GiB";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Print wall time and peak memory of large simulations (one process per case)");
  CLI::App* net = cmd->add_subcommand(
      "network",
      "An all-reduce (algorithm and protocol chosen as hetsim collective does) over DGX H100 "
      "nodes in a rail-optimised fat tree");
  net->add_option("--gpus", o->gpus, "GPU counts (multiples of 8)")->capture_default_str();
  net->add_option("--bytes", o->bytes, "All-reduce size")->capture_default_str();
  cmd->require_subcommand(1);
  net->callback([o, &action] {
    action = [o] {
      for (int gpus : o->gpus) {
        if (gpus < 8 || gpus % 8 != 0) throw InputError("--gpus: expected multiples of 8");
      }
      std::cout << fmt::format("{:>8} {:>10} {:>12} {:>12} {:>12}  {}\n", "gpus", "wall_s",
                               "peak_MiB", "sim_time", "busbw_GB/s", "algorithm");
      for (int gpus : o->gpus) {
        const CaseResult r = run_isolated([&] {
          const auto t0 = std::chrono::steady_clock::now();
          config::ClusterOptions opt;
          opt.nodes = gpus / 8;
          const platform::Cluster c(config::load_cluster("dgx-h100", opt));
          network::CollectiveRequest req;
          req.op = network::Op::allreduce;
          req.bytes = config::parse_quantity(o->bytes, config::Dimension::bytes);
          for (platform::GpuId g = 0; g < c.gpu_count(); ++g) req.ranks.push_back(g);
          const network::CollectiveResult res = network::simulate_collective(c, req);
          const auto rep = report::make_collective_report(c, req, res);
          CaseResult cr;
          cr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          cr.sim_s = rep.time_s;
          cr.busbw = rep.busbw_Bps;
          std::snprintf(cr.algorithm, sizeof cr.algorithm, "%s/%s", rep.algorithm.c_str(),
                        rep.protocol.c_str());
          return cr;
        });
        std::cout << fmt::format("{:>8} {:>10.3f} {:>12.1f} {:>12.6f} {:>12.2f}  {}\n", gpus,
                                 r.wall_s, r.peak_kib / 1024.0, r.sim_s, r.busbw / 1e9, r.algorithm)
                  << std::flush;
      }
      return 0;
    };
  });
}

}  // namespace hetsim::cli
