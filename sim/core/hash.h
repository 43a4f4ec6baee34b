// Fixed, portable hashes: the same bits on every platform and run, so that what is chosen by a
// hash (a route among equal ones, a straggler's draw) and what is cached by one never varies.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace hetsim {

// splitmix64's finaliser (Steele, Lea, Flood, OOPSLA 2014).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A running hash over values added one at a time.
struct Hasher {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  template <class T>
  requires std::is_integral_v<T>
  void add(T v) { h = splitmix64(h ^ static_cast<uint64_t>(v)); }
  void add(double x) {  // by its bits
    uint64_t b = 0;
    std::memcpy(&b, &x, sizeof b);
    add(b);
  }
  template <class T>
  void add(const T* p) {
    add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
  }
};

}  // namespace hetsim
