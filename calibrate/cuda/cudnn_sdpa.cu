// The cuDNN SDPA graphs, written out as the backend operations that cuDNN's fused flash-attention
// engines recognise (the decomposition the cuDNN frontend builds for cuDNN 9 before 9.21):
//   forward:  S = Q K^T * scale; causal: S = (row >= col) ? S : lowest; M = rowmax(S);
//             E = exp(S - M); Z = rowsum(E); stats = M + log(Z); O = (E / Z) V
//   backward: D = rowsum(dO * O) * 1; P = exp(mask(Q K^T * scale) - stats); dV = P^T dO;
//             dS = P * (dO V^T - D) * scale; dK = dS^T Q; dQ = dS K (through an FP32 accumulator)
// Tensors: K and V enter the matmuls as K^T and V^T by their strides, as cuDNN expects.
#include "cudnn_sdpa.h"

#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "check.h"

namespace hetsim::calibrate::cuda {

BackendDescriptor::~BackendDescriptor() {
  if (descriptor_ != nullptr) cudnnBackendDestroyDescriptor(descriptor_);  // teardown
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  std::swap(descriptor_, other.descriptor_);
  return *this;
}

cudnnStatus_t BackendDescriptor::create(cudnnBackendDescriptorType_t type) {
  BackendDescriptor fresh;
  const cudnnStatus_t status = cudnnBackendCreateDescriptor(type, &fresh.descriptor_);
  if (status == CUDNN_STATUS_SUCCESS) std::swap(descriptor_, fresh.descriptor_);
  return status;
}

namespace {

using Dims = std::array<std::int64_t, 4>;

// A step of the graph build that cuDNN refused. Thrown and caught inside this file only: the
// constructor turns it into reason().
struct BuildFailure {
  std::string step;
  cudnnStatus_t status;
  bool with_cudnn_message = true;  // false where cuDNN's last message is not about this step
};

void check(cudnnStatus_t status, const std::string& step) {
  if (status != CUDNN_STATUS_SUCCESS) throw BuildFailure{step, status};
}

// Uids of the tensors the variant pack binds; virtual tensors are numbered from kFirstVirtual.
constexpr std::int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kDO = 6, kDQ = 7, kDK = 8,
                       kDV = 9, kScale = 10, kMaskValue = 11, kOne = 12, kDQAccumulator = 13,
                       kRowDot = 14, kFirstVirtual = 100;

constexpr std::int64_t kTensorAlignment = 16;     // bytes; cudaMalloc gives 256
constexpr std::size_t kWorkspaceAlignment = 256;  // between the parts of run()'s workspace

std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Where run()'s workspace puts its parts: the plan's own workspace first, then (backward) the
// FP32 dQ accumulator [B, H, S, D] and the FP32 row sums of dO * O [B, H, S, 1].
struct WorkspaceLayout {
  std::size_t accumulator_offset = 0, accumulator_bytes = 0, row_dot_offset = 0, total_bytes = 0;

  WorkspaceLayout(const SdpaShape& s, std::size_t plan_bytes) {
    total_bytes = plan_bytes;
    if (!s.backward) return;
    const auto rows = static_cast<std::size_t>(s.batch * s.heads * s.seq);
    accumulator_offset = align_up(plan_bytes);
    accumulator_bytes = rows * static_cast<std::size_t>(s.head_dim) * sizeof(float);
    row_dot_offset = accumulator_offset + align_up(accumulator_bytes);
    total_bytes = row_dot_offset + align_up(rows * sizeof(float));
  }
};

Dims packed_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// cuDNN's own message for the last failure on this thread, first line only.
std::string last_cudnn_message() {
  char text[512] = {};
  cudnnGetLastErrorString(text, sizeof text);
  std::string line(text);
  line = line.substr(0, line.find('\n'));
  return line;
}

// Creates, sets and finalises descriptors; every one it creates goes into `owned`, so nothing
// leaks whichever step fails.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::vector<BackendDescriptor>* owned) : owned_(owned) {}

  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const std::string& what) {
    BackendDescriptor d;
    check(d.create(type), "create " + what);
    owned_->push_back(std::move(d));
    return owned_->back().get();
  }

  cudnnBackendDescriptor_t tensor(const std::string& name, std::int64_t uid, cudnnDataType_t type,
                                  const Dims& dims, const Dims& strides, bool is_virtual,
                                  bool by_value = false) {
    const std::string what = "tensor " + name;
    const cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), what);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), what);
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kTensorAlignment, what);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    check(cudnnBackendFinalize(t), "finalize " + what);
    return t;
  }

  // A one-element FP32 tensor whose value the variant pack passes from host memory.
  cudnnBackendDescriptor_t scalar(const std::string& name, std::int64_t uid) {
    const Dims one = {1, 1, 1, 1};
    return tensor(name, uid, CUDNN_DATA_FLOAT, one, one, false, true);
  }

  // An intermediate that never reaches memory, with the next free uid.
  cudnnBackendDescriptor_t virtual_tensor(const std::string& name, cudnnDataType_t type,
                                          const Dims& dims, const Dims& strides) {
    return tensor(name, next_virtual_uid_++, type, dims, strides, true);
  }

  // c = a b over the last two dimensions, batched over the first two; FP32 accumulation.
  void matmul(const std::string& name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t c) {
    const std::string what = "matmul " + name;
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    check(cudnnBackendFinalize(desc), "finalize " + what + " descriptor");

    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, what);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, desc, what);
    finish(op, what);
  }

  // y = mode(x[, b[, t]]); `b` is the second operand, `t` the third (BINARY_SELECT's mask);
  // `axis` only for GEN_INDEX.
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t b = nullptr,
                 cudnnBackendDescriptor_t t = nullptr, cudnnDataType_t precision = CUDNN_DATA_FLOAT,
                 std::int64_t axis = -1) {
    const std::string what = "pointwise " + name;
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision, what);
    if (axis >= 0) set(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    check(cudnnBackendFinalize(desc), "finalize " + what + " descriptor");

    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    link(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc, what);
    link(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, what);
    if (b != nullptr) link(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, what);
    if (t != nullptr) link(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, what);
    link(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, what);
    finish(op, what);
  }

  // y = reduce(x) over the dimensions where y has extent 1; FP32.
  void reduction(const std::string& name, cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    const std::string what = "reduction " + name;
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, what);
    set(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    check(cudnnBackendFinalize(desc), "finalize " + what + " descriptor");

    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    link(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, what);
    link(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, what);
    link(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc, what);
    finish(op, what);
  }

  // y: the same elements as x under y's dimensions and strides (here: a transposed view).
  void reshape(const std::string& name, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    const std::string what = "reshape " + name;
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    link(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, what);
    link(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, what);
    finish(op, what);
  }

  const std::vector<cudnnBackendDescriptor_t>& operations() const { return operations_; }

 private:
  static void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, std::int64_t count, const void* values,
                  const std::string& what) {
    check(cudnnBackendSetAttribute(d, name, type, count, values), "set attribute of " + what);
  }
  static void link(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnBackendDescriptor_t target, const std::string& what) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target, what);
  }
  void finish(cudnnBackendDescriptor_t op, const std::string& what) {
    check(cudnnBackendFinalize(op), "finalize " + what);
    operations_.push_back(op);
  }

  std::vector<BackendDescriptor>* owned_;
  std::vector<cudnnBackendDescriptor_t> operations_;
  std::int64_t next_virtual_uid_ = kFirstVirtual;
};

// The shapes both passes use.
struct Layout {
  Dims bhsd, bhsd_strides;      // Q, K, V, O and their gradients
  Dims bhds, bhds_strides;      // K^T, V^T: K and V in memory, read transposed
  Dims scores, scores_strides;  // [B, H, S, S] row-major
  Dims scores_t_strides;        // the same memory read transposed
  Dims rows, rows_strides;      // [B, H, S, 1]: per-row statistics

  explicit Layout(const SdpaShape& s) {
    const std::int64_t b = s.batch, h = s.heads, n = s.seq, d = s.head_dim;
    bhsd = {b, h, n, d};
    bhsd_strides = packed_strides(bhsd);
    bhds = {b, h, d, n};
    bhds_strides = {h * n * d, n * d, 1, d};
    scores = {b, h, n, n};
    scores_strides = packed_strides(scores);
    scores_t_strides = {h * n * n, n * n, 1, n};
    rows = {b, h, n, 1};
    rows_strides = {h * n, n, 1, 1};
  }
};

// S = Q K^T * scale, then the causal mask: the part of the graph both passes share.
cudnnBackendDescriptor_t masked_scores(GraphBuilder& g, const Layout& l, bool causal,
                                       cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t k_t,
                                       cudnnBackendDescriptor_t scale) {
  const cudnnBackendDescriptor_t s =
      g.virtual_tensor("S", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.matmul("Q K^T", q, k_t, s);
  const cudnnBackendDescriptor_t scaled =
      g.virtual_tensor("S * scale", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("S * scale", CUDNN_POINTWISE_MUL, s, scaled, scale);
  if (!causal) return scaled;

  // Keep S where row >= col (a query sees its own and earlier keys), else the lowest float (not
  // -inf, so that a fully masked row stays finite).
  const cudnnBackendDescriptor_t mask_value = g.scalar("mask value", kMaskValue);
  const cudnnBackendDescriptor_t row =
      g.virtual_tensor("row index", CUDNN_DATA_INT32, l.scores, l.scores_strides);
  g.pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, scaled, row, nullptr, nullptr,
              CUDNN_DATA_INT32, 2);
  const cudnnBackendDescriptor_t col =
      g.virtual_tensor("column index", CUDNN_DATA_INT32, l.scores, l.scores_strides);
  g.pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, scaled, col, nullptr, nullptr,
              CUDNN_DATA_INT32, 3);
  const cudnnBackendDescriptor_t keep =
      g.virtual_tensor("row >= column", CUDNN_DATA_BOOLEAN, l.scores, l.scores_strides);
  g.pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
  const cudnnBackendDescriptor_t masked =
      g.virtual_tensor("masked S", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, scaled, masked, mask_value, keep);
  return masked;
}

void build_forward(GraphBuilder& g, const SdpaShape& shape) {
  const Layout l(shape);
  const cudnnBackendDescriptor_t q =
      g.tensor("Q", kQ, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t k_t =
      g.tensor("K^T", kK, CUDNN_DATA_BFLOAT16, l.bhds, l.bhds_strides, false);
  const cudnnBackendDescriptor_t v =
      g.tensor("V", kV, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t o =
      g.tensor("O", kO, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t stats =
      g.tensor("stats", kStats, CUDNN_DATA_FLOAT, l.rows, l.rows_strides, false);
  const cudnnBackendDescriptor_t scale = g.scalar("scale", kScale);

  const cudnnBackendDescriptor_t s = masked_scores(g, l, shape.causal, q, k_t, scale);

  // Softmax with its statistics: stats = max + log(sum) is what the backward pass needs.
  const cudnnBackendDescriptor_t row_max =
      g.virtual_tensor("row max", CUDNN_DATA_FLOAT, l.rows, l.rows_strides);
  g.reduction("row max", CUDNN_REDUCE_TENSOR_MAX, s, row_max);
  const cudnnBackendDescriptor_t centred =
      g.virtual_tensor("S - max", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("S - max", CUDNN_POINTWISE_SUB, s, centred, row_max);
  const cudnnBackendDescriptor_t e =
      g.virtual_tensor("exp", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("exp", CUDNN_POINTWISE_EXP, centred, e);
  const cudnnBackendDescriptor_t row_sum =
      g.virtual_tensor("row sum", CUDNN_DATA_FLOAT, l.rows, l.rows_strides);
  g.reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  const cudnnBackendDescriptor_t log_sum =
      g.virtual_tensor("log sum", CUDNN_DATA_FLOAT, l.rows, l.rows_strides);
  g.pointwise("log sum", CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g.pointwise("stats", CUDNN_POINTWISE_ADD, row_max, stats, log_sum);
  // The probabilities enter the second matmul in the input type (a requirement of the engines).
  const cudnnBackendDescriptor_t p =
      g.virtual_tensor("P", CUDNN_DATA_BFLOAT16, l.scores, l.scores_strides);
  g.pointwise("exp / sum", CUDNN_POINTWISE_DIV, e, p, row_sum);
  g.matmul("P V", p, v, o);
}

void build_backward(GraphBuilder& g, const SdpaShape& shape) {
  const Layout l(shape);
  const cudnnBackendDescriptor_t q =
      g.tensor("Q", kQ, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t k_t =
      g.tensor("K^T", kK, CUDNN_DATA_BFLOAT16, l.bhds, l.bhds_strides, false);
  const cudnnBackendDescriptor_t v_t =
      g.tensor("V^T", kV, CUDNN_DATA_BFLOAT16, l.bhds, l.bhds_strides, false);
  const cudnnBackendDescriptor_t o =
      g.tensor("O", kO, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t d_o =
      g.tensor("dO", kDO, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t stats =
      g.tensor("stats", kStats, CUDNN_DATA_FLOAT, l.rows, l.rows_strides, false);
  const cudnnBackendDescriptor_t d_q =
      g.tensor("dQ", kDQ, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t d_k =
      g.tensor("dK", kDK, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t d_v =
      g.tensor("dV", kDV, CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides, false);
  // Two FP32 tensors in global memory (run()'s workspace): the engines accumulate dQ across
  // key blocks, and keep D = rowsum(dO * O) for every query block.
  const cudnnBackendDescriptor_t d_q_accumulator =
      g.tensor("dQ accumulator", kDQAccumulator, CUDNN_DATA_FLOAT, l.bhsd, l.bhsd_strides, false);
  const cudnnBackendDescriptor_t row_dot =
      g.tensor("rowsum(dO * O)", kRowDot, CUDNN_DATA_FLOAT, l.rows, l.rows_strides, false);
  const cudnnBackendDescriptor_t scale = g.scalar("scale", kScale);
  const cudnnBackendDescriptor_t one = g.scalar("one", kOne);

  // D = rowsum(dO * O), times 1 (the place of the dropout scale).
  const cudnnBackendDescriptor_t d_o_o =
      g.virtual_tensor("dO * O", CUDNN_DATA_FLOAT, l.bhsd, l.bhsd_strides);
  g.pointwise("dO * O", CUDNN_POINTWISE_MUL, d_o, d_o_o, o);
  const cudnnBackendDescriptor_t dot =
      g.virtual_tensor("rowsum(dO * O) unscaled", CUDNN_DATA_FLOAT, l.rows, l.rows_strides);
  g.reduction("rowsum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, d_o_o, dot);
  g.pointwise("rowsum(dO * O) * 1", CUDNN_POINTWISE_MUL, dot, row_dot, one);

  // P recomputed from the saved statistics.
  const cudnnBackendDescriptor_t s = masked_scores(g, l, shape.causal, q, k_t, scale);
  const cudnnBackendDescriptor_t centred =
      g.virtual_tensor("S - stats", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("S - stats", CUDNN_POINTWISE_SUB, s, centred, stats);
  const cudnnBackendDescriptor_t p =
      g.virtual_tensor("P", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("exp", CUDNN_POINTWISE_EXP, centred, p);

  // dV = P^T dO.
  const cudnnBackendDescriptor_t p_t =
      g.virtual_tensor("P^T", CUDNN_DATA_BFLOAT16, l.scores, l.scores_t_strides);
  g.reshape("P^T", p, p_t);
  g.matmul("P^T dO", p_t, d_o, d_v);

  // dS = P * (dO V^T - D) * scale.
  const cudnnBackendDescriptor_t d_p =
      g.virtual_tensor("dP", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.matmul("dO V^T", d_o, v_t, d_p);
  const cudnnBackendDescriptor_t d_p_centred =
      g.virtual_tensor("dP - D", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("dP - D", CUDNN_POINTWISE_SUB, d_p, d_p_centred, row_dot);
  const cudnnBackendDescriptor_t d_s_unscaled =
      g.virtual_tensor("(dP - D) * P", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("(dP - D) * P", CUDNN_POINTWISE_MUL, d_p_centred, d_s_unscaled, p);
  const cudnnBackendDescriptor_t d_s =
      g.virtual_tensor("dS", CUDNN_DATA_FLOAT, l.scores, l.scores_strides);
  g.pointwise("dS * scale", CUDNN_POINTWISE_MUL, d_s_unscaled, d_s, scale);

  // dK = dS^T Q.
  const cudnnBackendDescriptor_t d_s_t =
      g.virtual_tensor("dS^T", CUDNN_DATA_BFLOAT16, l.scores, l.scores_t_strides);
  g.reshape("dS^T", d_s, d_s_t);
  g.matmul("dS^T Q", d_s_t, q, d_k);

  // dQ = dS K, accumulated in FP32, then converted.
  const cudnnBackendDescriptor_t k =
      g.virtual_tensor("K", CUDNN_DATA_BFLOAT16, l.bhsd, l.bhsd_strides);
  g.reshape("K", k_t, k);
  g.matmul("dS K", d_s, k, d_q_accumulator);
  g.pointwise("dQ", CUDNN_POINTWISE_IDENTITY, d_q_accumulator, d_q);
}

}  // namespace

CudnnSdpa::CudnnSdpa(cudnnHandle_t handle, const SdpaShape& shape)
    : handle_(handle), shape_(shape) {
  scale_ = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  mask_value_ = std::numeric_limits<float>::lowest();
  const std::size_t version = cudnnGetVersion();
  zero_dq_accumulator_ = version < 90600;
  // cuDNN up to 9.15 computes a wrong backward pass when S is not a multiple of 128 and no
  // padding mask is given (the cuDNN frontend adds one); refuse instead.
  if (shape.backward && shape.seq % 128 != 0 && version <= 91500) {
    reason_ = "seq % 128 != 0: the backward pass needs cuDNN 9.15.1 or later, loaded " +
              cudnn_version_string();
    return;
  }
  try {
    build();
  } catch (const BuildFailure& failure) {
    plan_ = nullptr;
    reason_ = failure.step + ": " + cudnnGetErrorString(failure.status);
    const std::string detail = failure.with_cudnn_message ? last_cudnn_message() : "";
    if (!detail.empty()) reason_ += " (" + detail + ")";
  }
}

CudnnSdpa::~CudnnSdpa() {
  while (!owned_.empty()) owned_.pop_back();  // plan before configs before graph before tensors
}

void CudnnSdpa::build() {
  GraphBuilder g(&owned_);
  if (shape_.backward)
    build_backward(g, shape_);
  else
    build_forward(g, shape_);

  // The deprecation of the *_HANDLE attributes in cuDNN 9.x headers is opt-in
  // (CUDNN_WARN_DEPRECATED); earlier 9.x releases require them.
  const cudnnBackendDescriptor_t graph =
      g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  const std::vector<cudnnBackendDescriptor_t>& ops = g.operations();
  check(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                 &handle_),
        "set the operation graph's handle");
  check(
      cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<std::int64_t>(ops.size()), ops.data()),
      "set the operation graph's operations");
  check(cudnnBackendFinalize(graph), "finalize the operation graph");

  const cudnnBackendDescriptor_t heuristics =
      g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  check(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
        "set the heuristics' graph");
  check(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                 &mode),
        "set the heuristics' mode");
  check(cudnnBackendFinalize(heuristics), "heuristics (mode A)");
  std::int64_t available = 0;
  check(cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr),
        "count the heuristics' engine configs");
  if (available <= 0)
    throw BuildFailure{"heuristics (mode A) found no engine", CUDNN_STATUS_NOT_SUPPORTED, false};

  std::vector<cudnnBackendDescriptor_t> configs;
  for (std::int64_t i = 0; i < available; ++i)
    configs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
  std::int64_t returned = 0;
  check(
      cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned, configs.data()),
      "get the heuristics' engine configs");

  // The configs that pass cuDNN's support checks for this device (it drops the others here).
  if (returned <= 0)
    throw BuildFailure{"heuristics (mode A): none of " + std::to_string(available) +
                           " engine configs passed cuDNN's support checks",
                       CUDNN_STATUS_NOT_SUPPORTED, false};

  // Configs in the heuristics' order of preference; the first whose plan finalises is kept.
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (std::int64_t i = 0; i < returned && plan_ == nullptr; ++i) {
    BackendDescriptor plan;
    check(plan.create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), "create an execution plan");
    const cudnnBackendDescriptor_t config = configs[static_cast<std::size_t>(i)];
    check(cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                   1, &handle_),
          "set the execution plan's handle");
    check(cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config),
          "set the execution plan's engine config");
    last = cudnnBackendFinalize(plan.get());
    if (last != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t count = 0, bytes = 0;
    check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &count, &bytes),
          "get the execution plan's workspace size");
    plan_workspace_bytes_ = static_cast<std::size_t>(bytes);
    owned_.push_back(std::move(plan));
    plan_ = owned_.back().get();
  }
  if (plan_ == nullptr)
    throw BuildFailure{
        "finalize an execution plan (none of " + std::to_string(returned) + " engine configs)",
        last};
}

std::size_t CudnnSdpa::workspace_bytes() const {
  return WorkspaceLayout(shape_, plan_workspace_bytes_).total_bytes;
}

void CudnnSdpa::run(const SdpaBuffers& buffers, void* workspace, cudaStream_t stream) const {
  CHECK_CUDNN(try_run(buffers, workspace, stream));
}

cudnnStatus_t CudnnSdpa::try_run(const SdpaBuffers& buffers, void* workspace,
                                 cudaStream_t stream) const {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  const auto bind = [&](std::int64_t uid, const void* pointer) {
    uids.push_back(uid);
    pointers.push_back(const_cast<void*>(pointer));  // cuDNN reads inputs through void*
  };
  bind(kQ, buffers.q);
  bind(kK, buffers.k);
  bind(kV, buffers.v);
  bind(kO, buffers.o);
  bind(kStats, buffers.stats);
  bind(kScale, &scale_);
  if (shape_.causal) bind(kMaskValue, &mask_value_);
  std::size_t accumulator_bytes = 0;
  char* accumulator = nullptr;
  if (shape_.backward) {
    const WorkspaceLayout layout(shape_, plan_workspace_bytes_);
    accumulator = static_cast<char*>(workspace) + layout.accumulator_offset;
    accumulator_bytes = layout.accumulator_bytes;
    char* row_dot = static_cast<char*>(workspace) + layout.row_dot_offset;
    bind(kDO, buffers.dout);
    bind(kDQ, buffers.dq);
    bind(kDK, buffers.dk);
    bind(kDV, buffers.dv);
    bind(kOne, &one_);
    bind(kDQAccumulator, accumulator);
    bind(kRowDot, row_dot);
  }
  std::vector<const void*> key(pointers.begin(), pointers.end());
  key.push_back(workspace);
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  // Stops at the first failing call, keeping its status.
  const auto step = [&status](cudnnStatus_t s) {
    if (status == CUDNN_STATUS_SUCCESS) status = s;
    return status == CUDNN_STATUS_SUCCESS;
  };
  if (pack_.get() == nullptr || key != pack_pointers_) {
    BackendDescriptor pack;
    const auto count = static_cast<std::int64_t>(uids.size());
    if (step(pack.create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)) &&
        step(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                      CUDNN_TYPE_INT64, count, uids.data())) &&
        step(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, count, pointers.data())) &&
        step(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                      CUDNN_TYPE_VOID_PTR, 1, &workspace)) &&
        step(cudnnBackendFinalize(pack.get()))) {
      pack_ = std::move(pack);
      pack_pointers_ = std::move(key);
    }
    if (status != CUDNN_STATUS_SUCCESS) return status;
  }
  if (zero_dq_accumulator_ && accumulator != nullptr)
    CHECK_CUDA(cudaMemsetAsync(accumulator, 0, accumulator_bytes, stream));
  if (step(cudnnSetStream(handle_, stream))) step(cudnnBackendExecute(handle_, plan_, pack_.get()));
  return status;
}

std::string cudnn_status_text(cudnnStatus_t status) {
  const std::string message = last_cudnn_message();
  return std::string(cudnnGetErrorString(status)) + (message.empty() ? "" : ": " + message);
}

std::string cudnn_version_string() {
  // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 used major*1000 + minor*100 + patch.
  const std::size_t v = cudnnGetVersion();
  const std::size_t major_unit = v >= 90000 ? 10000 : 1000;
  return std::to_string(v / major_unit) + "." + std::to_string((v % major_unit) / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace hetsim::calibrate::cuda
