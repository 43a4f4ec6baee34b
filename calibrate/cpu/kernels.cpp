// The CPU backend's kernels; see kernels.h.
#include "calibrate/cpu/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

void gemm_fp32(int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
               const std::vector<float>& b, std::vector<float>& c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
              0.0f, c.data(), n);
}

Attention::Attention(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal)
    : heads_(batch * heads), s_(seq), d_(head_dim), causal_(causal) {
  const size_t n = static_cast<size_t>(heads_ * s_ * d_);
  for (std::vector<float>* b : {&q_, &k_, &v_, &o_, &do_, &dq_, &dk_, &dv_}) b->assign(n, 0.01f);
  // P is kept per head (the backward reads the forward's); dP is a scratch row block.
  p_.assign(static_cast<size_t>(heads_ * s_ * s_), 0.0f);
  dp_.assign(static_cast<size_t>(s_ * s_), 0.0f);
}

double Attention::forward() {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
  const size_t hd = static_cast<size_t>(s_ * d_), ss = static_cast<size_t>(s_ * s_);
  for (int64_t h = 0; h < heads_; ++h) {
    float* p = p_.data() + h * ss;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s_, s_, d_, scale, q_.data() + h * hd, d_,
                k_.data() + h * hd, d_, 0.0f, p, s_);
    for (int64_t i = 0; i < s_; ++i) {
      float* row = p + i * s_;
      const int64_t last = causal_ ? i + 1 : s_;  // masked scores are zero after the softmax
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < last; ++j) mx = std::max(mx, row[j]);
      float sum = 0;
      for (int64_t j = 0; j < last; ++j) sum += row[j] = std::exp(row[j] - mx);
      const float inv = 1 / sum;
      for (int64_t j = 0; j < last; ++j) row[j] *= inv;
      for (int64_t j = last; j < s_; ++j) row[j] = 0;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s_, d_, s_, 1.0f, p, s_,
                v_.data() + h * hd, d_, 0.0f, o_.data() + h * hd, d_);
  }
  return double(o_[o_.size() / 2]);
}

double Attention::backward() {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
  const size_t hd = static_cast<size_t>(s_ * d_), ss = static_cast<size_t>(s_ * s_);
  std::vector<float> delta(static_cast<size_t>(s_));
  for (int64_t h = 0; h < heads_; ++h) {
    const float* p = p_.data() + h * ss;
    const float* dout = do_.data() + h * hd;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s_, d_, s_, 1.0f, p, s_, dout, d_, 0.0f,
                dv_.data() + h * hd, d_);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s_, s_, d_, 1.0f, dout, d_,
                v_.data() + h * hd, d_, 0.0f, dp_.data(), s_);
    for (int64_t i = 0; i < s_; ++i) {
      double dot = 0;
      for (int64_t c = 0; c < d_; ++c) dot += double(dout[i * d_ + c]) * o_[h * hd + i * d_ + c];
      delta[i] = static_cast<float>(dot);
    }
    for (int64_t i = 0; i < s_; ++i) {
      float* row = dp_.data() + i * s_;
      const float* prow = p + i * s_;
      for (int64_t j = 0; j < s_; ++j) row[j] = prow[j] * (row[j] - delta[i]) * scale;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s_, d_, s_, 1.0f, dp_.data(), s_,
                k_.data() + h * hd, d_, 0.0f, dq_.data() + h * hd, d_);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s_, d_, s_, 1.0f, dp_.data(), s_,
                q_.data() + h * hd, d_, 0.0f, dk_.data() + h * hd, d_);
  }
  return double(dq_[dq_.size() / 3]) + double(dk_[dk_.size() / 2]);
}

namespace {

using workload::ConvShape;

bool conv_is_pointwise(const ConvShape& c) {
  return c.r == 1 && c.s == 1 && c.stride == 1 && c.pad_h == 0 && c.pad_w == 0;
}

// col[(ci r + y) s + x][oh q + ow] = x[ci][oh stride - pad_h + y][ow stride - pad_w + x], 0 in
// the padding.
void im2col(const ConvShape& c, const float* x, float* col) {
  const int64_t p = c.p(), q = c.q();
  for (int64_t ci = 0; ci < c.c; ++ci) {
    const float* plane = x + ci * c.h * c.w;
    for (int64_t fy = 0; fy < c.r; ++fy) {
      for (int64_t fx = 0; fx < c.s; ++fx) {
        float* row = col + ((ci * c.r + fy) * c.s + fx) * p * q;
        for (int64_t oh = 0; oh < p; ++oh) {
          const int64_t ih = oh * c.stride - c.pad_h + fy;
          float* out = row + oh * q;
          if (ih < 0 || ih >= c.h) {
            std::fill(out, out + q, 0.0f);
            continue;
          }
          for (int64_t ow = 0; ow < q; ++ow) {
            const int64_t iw = ow * c.stride - c.pad_w + fx;
            out[ow] = iw < 0 || iw >= c.w ? 0.0f : plane[ih * c.w + iw];
          }
        }
      }
    }
  }
}

// The adjoint of im2col: dx (zeroed here) gathers every column entry that read it.
void col2im(const ConvShape& c, const float* col, float* dx) {
  const int64_t p = c.p(), q = c.q();
  std::fill(dx, dx + c.c * c.h * c.w, 0.0f);
  for (int64_t ci = 0; ci < c.c; ++ci) {
    float* plane = dx + ci * c.h * c.w;
    for (int64_t fy = 0; fy < c.r; ++fy) {
      for (int64_t fx = 0; fx < c.s; ++fx) {
        const float* row = col + ((ci * c.r + fy) * c.s + fx) * p * q;
        for (int64_t oh = 0; oh < p; ++oh) {
          const int64_t ih = oh * c.stride - c.pad_h + fy;
          if (ih < 0 || ih >= c.h) continue;
          for (int64_t ow = 0; ow < q; ++ow) {
            const int64_t iw = ow * c.stride - c.pad_w + fx;
            if (iw >= 0 && iw < c.w) plane[ih * c.w + iw] += row[oh * q + ow];
          }
        }
      }
    }
  }
}

}  // namespace

size_t conv_col_elements(const ConvShape& c) {
  return static_cast<size_t>(c.c * c.r * c.s * c.p() * c.q());
}

void conv_forward(const ConvShape& c, const float* x, const float* w, float* y, float* col) {
  const int64_t pq = c.p() * c.q(), crs = c.c * c.r * c.s;
  for (int64_t i = 0; i < c.n; ++i) {
    const float* xi = x + i * c.c * c.h * c.w;
    const float* cols = xi;
    if (!conv_is_pointwise(c)) im2col(c, xi, col), cols = col;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.k, pq, crs, 1.0f, w, crs, cols, pq,
                0.0f, y + i * c.k * pq, pq);
  }
}

void conv_data_grad(const ConvShape& c, const float* dy, const float* w, float* dx, float* col) {
  const int64_t pq = c.p() * c.q(), crs = c.c * c.r * c.s;
  for (int64_t i = 0; i < c.n; ++i) {
    float* dxi = dx + i * c.c * c.h * c.w;
    // A pointwise filter's column matrix is dX_i itself.
    float* cols = conv_is_pointwise(c) ? dxi : col;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, pq, c.k, 1.0f, w, crs,
                dy + i * c.k * pq, pq, 0.0f, cols, pq);
    if (!conv_is_pointwise(c)) col2im(c, col, dxi);
  }
}

void conv_weight_grad(const ConvShape& c, const float* x, const float* dy, float* dw, float* col) {
  const int64_t pq = c.p() * c.q(), crs = c.c * c.r * c.s;
  for (int64_t i = 0; i < c.n; ++i) {
    const float* xi = x + i * c.c * c.h * c.w;
    const float* cols = xi;
    if (!conv_is_pointwise(c)) im2col(c, xi, col), cols = col;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c.k, crs, pq, 1.0f, dy + i * c.k * pq, pq,
                cols, pq, i == 0 ? 0.0f : 1.0f, dw, crs);
  }
}

Conv::Conv(const ConvShape& shape) : shape_(shape) {
  const ConvShape& c = shape_;
  x_.assign(static_cast<size_t>(c.n * c.c * c.h * c.w), 0.5f);
  w_.assign(static_cast<size_t>(c.k * c.c * c.r * c.s), 0.01f);
  y_.assign(static_cast<size_t>(c.n * c.k * c.p() * c.q()), 0.25f);
  col_.assign(conv_col_elements(c), 0.0f);
}

double Conv::run() {
  switch (shape_.pass) {
    case workload::ConvPass::forward:
      conv_forward(shape_, x_.data(), w_.data(), y_.data(), col_.data());
      return double(y_[y_.size() / 2]);
    case workload::ConvPass::data_grad:
      conv_data_grad(shape_, y_.data(), w_.data(), x_.data(), col_.data());
      return double(x_[x_.size() / 2]);
    case workload::ConvPass::weight_grad:
      conv_weight_grad(shape_, x_.data(), y_.data(), w_.data(), col_.data());
      return double(w_[w_.size() / 2]);
  }
  return 0;
}

}  // namespace hetsim::calibrate::cpu
