// NCCL latency and protocol constants; see protocol.h for the sources.
#include "sim/network/protocol.h"

#include <cmath>

namespace hetsim::network {

namespace {
Time us(double v) { return Time::from_seconds(v * 1e-6); }
}  // namespace

std::string to_string(Algorithm a) {
  switch (a) {
    case Algorithm::ring:
      return "ring";
    case Algorithm::tree:
      return "tree";
    case Algorithm::hierarchical:
      return "hierarchical";
    case Algorithm::direct:
      return "direct";
  }
  return "?";
}

std::string to_string(Protocol p) {
  switch (p) {
    case Protocol::ll:
      return "LL";
    case Protocol::ll128:
      return "LL128";
    case Protocol::simple:
      return "Simple";
  }
  return "?";
}

double payload_fraction(Protocol p) {
  switch (p) {
    case Protocol::ll:
      return 0.5;
    case Protocol::ll128:
      return 120.0 / 128.0;
    case Protocol::simple:
      return 1.0;
  }
  return 1.0;
}

Time step_latency(Algorithm a, Protocol p, config::LinkKind kind) {
  // Rows: NVLink, PCIe (and the CPU socket link), network; columns LL, LL128, Simple [nccl-tune].
  static const double ring[3][3] = {{0.6, 1.9, 3.4}, {1.0, 2.5, 5.7}, {2.7, 4.0, 14.0}};
  static const double tree[3][3] = {{0.6, 1.25, 4.0}, {1.0, 1.9, 4.0}, {5.0, 8.5, 14.0}};
  const int row = kind == config::LinkKind::nvlink ? 0 : kind == config::LinkKind::network ? 2 : 1;
  const int col = static_cast<int>(p);
  return us(a == Algorithm::tree ? tree[row][col] : ring[row][col]);
}

Time base_latency(Algorithm a, Protocol p) {
  static const double ring[3] = {6.6, 14.0, 8.4};
  static const double tree[3] = {6.8, 14.0, 8.4};
  return us(a == Algorithm::tree ? tree[static_cast<int>(p)] : ring[static_cast<int>(p)]);
}

double tree_to_ring_bandwidth(size_t ranks) {
  if (ranks < 2) return 1;
  const double n = static_cast<double>(ranks);
  return 0.92 * (n - 1) / n;
}

double tree_size_factor(Protocol p, double bytes) {
  // Rows LL, LL128, Simple; column k is 64 x 2^k bytes (NCCL 2.19 onwards, 23 columns).
  static const double f[3][23] = {
      {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
       .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
      {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
       .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
      {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
  if (!(bytes >= 128)) return f[static_cast<int>(p)][0];
  const int k = static_cast<int>(std::floor(std::log2(bytes / 64)));
  return k >= 23 ? 1.0 : f[static_cast<int>(p)][k];
}

Time launch_overhead() { return us(24.0); }

}  // namespace hetsim::network
