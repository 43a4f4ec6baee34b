// Memory-bound kernels for the CPU backend; see kernels.h.
#include "calibrate/cpu/kernels.h"

#include <algorithm>
#include <cmath>

namespace hetsim::calibrate::cpu {

const std::vector<std::string>& memory_kernels() {
  static const std::vector<std::string> k = {"copy", "layernorm", "rmsnorm", "softmax",
                                             "gelu", "swiglu",    "dropout", "residual_add",
                                             "adam", "reduce"};
  return k;
}

namespace {
// Floats read and written per element, by kernel.
int traffic(const std::string& k) {
  if (k == "residual_add" || k == "swiglu") return 3;  // two inputs, one output
  if (k == "adam") return 8;  // param, grad, m, v read; param, m, v written (+ lr)
  if (k == "reduce") return 1;
  return 2;  // one input, one output
}
}  // namespace

size_t elements_for(const std::string& kernel, double bytes) {
  return std::max<size_t>(1024, static_cast<size_t>(bytes / (4.0 * traffic(kernel))));
}

double run_memory_kernel(const std::string& k, std::vector<float>& a, std::vector<float>& b,
                         std::vector<float>& c, size_t n) {
  const size_t row = 1024;  // rows of 1024 for the normalisations and softmax
  if (k == "copy") {
    std::copy(a.begin(), a.begin() + n, b.begin());
  } else if (k == "layernorm" || k == "rmsnorm") {
    for (size_t r = 0; r + row <= n; r += row) {
      double mean = 0, sq = 0;
      for (size_t i = r; i < r + row; ++i) mean += a[i], sq += double(a[i]) * a[i];
      mean = k == "layernorm" ? mean / row : 0;
      const double inv = 1 / std::sqrt(sq / row - mean * mean + 1e-5);
      for (size_t i = r; i < r + row; ++i) b[i] = static_cast<float>((a[i] - mean) * inv);
    }
  } else if (k == "softmax") {
    for (size_t r = 0; r + row <= n; r += row) {
      float mx = a[r];
      for (size_t i = r; i < r + row; ++i) mx = std::max(mx, a[i]);
      double sum = 0;
      for (size_t i = r; i < r + row; ++i) sum += b[i] = std::exp(a[i] - mx);
      const float inv = static_cast<float>(1 / sum);
      for (size_t i = r; i < r + row; ++i) b[i] *= inv;
    }
  } else if (k == "gelu") {
    for (size_t i = 0; i < n; ++i) {
      const float x = a[i];
      b[i] = 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    }
  } else if (k == "swiglu") {
    for (size_t i = 0; i < n; ++i) c[i] = a[i] / (1 + std::exp(-a[i])) * b[i];
  } else if (k == "dropout") {
    uint32_t s = 12345;
    for (size_t i = 0; i < n; ++i) {
      s = s * 1664525u + 1013904223u;
      b[i] = (s >> 8) % 10 ? a[i] * 1.1111111f : 0.0f;
    }
  } else if (k == "residual_add") {
    for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  } else if (k == "adam") {
    // Parameters in a, gradients in b, moments interleaved in c (2 per element).
    for (size_t i = 0; i < n; ++i) {
      float& m = c[2 * i];
      float& v = c[2 * i + 1];
      m = 0.9f * m + 0.1f * b[i];
      v = 0.999f * v + 0.001f * b[i] * b[i];
      a[i] -= 1e-4f * m / (std::sqrt(v) + 1e-8f);
    }
  } else if (k == "reduce") {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += a[i];
    return s;
  }
  return double(b[n / 2]) + double(a[n / 3]);
}

}  // namespace hetsim::calibrate::cpu
