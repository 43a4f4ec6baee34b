// The program file of hetsim-execute-cuda (calibrate/README.md "Executing a plan on one GPU"):
// the compute kernels of one device's training iteration in order, as `hetsim execute --backend
// cuda --program-out FILE` writes them. Parsed with the standard library only, so the program
// builds on a GPU machine that has nothing but the CUDA toolkit.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetsim::calibrate::cuda {

// The first line that is not a comment.
inline constexpr const char* kProgramMagic = "hetsim-execute-program,2";
// The header of the op rows.
inline constexpr const char* kProgramColumns =
    "task,segment,op,kind,name,m,n,k,batch,heads,seq,head_dim,causal,fused,bytes,memory_kernel,"
    "predicted_s,precision";

enum class ProgramOpKind { gemm, attention_forward, attention_backward, memory };

struct ProgramOp {
  std::int64_t task = 0, segment = 0, op = 0;  // index in the program, the segment, the group's op
  ProgramOpKind kind = ProgramOpKind::memory;
  std::string name;
  std::int64_t m = 0, n = 0, k = 0, batch = 0;    // gemm (batch 0 or 1: one matrix)
  std::int64_t heads = 0, seq = 0, head_dim = 0;  // attention (batch above)
  bool causal = false, fused = false;             // attention
  double bytes = 0;                               // memory: bytes moved
  std::string memory_kernel;                      // memory: calibrate's kernel name
  double predicted_s = 0;
  // The precision the op's math runs at: the program's, except where the plan's precision does
  // not reach it (under fp8, attention and the output layer's GEMMs run in bf16, as Transformer
  // Engine and Megatron-LM run them; hetsim's workload::math_precision).
  std::string precision;
};

struct Program {
  std::string precision;  // fp32 | fp16 | bf16 | fp8: the plan's
  double predicted_iteration_s = 0;
  std::vector<ProgramOp> ops;
};

// An error in a program file: "FILE:LINE: what".
struct ProgramError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses and validates (known kinds, precision and memory kernels, positive shapes, the op
// count of the `ops` line); throws ProgramError.
Program parse_program(const std::string& text, const std::string& file);
Program read_program(const std::string& file);

const char* kind_name(ProgramOpKind kind);

}  // namespace hetsim::calibrate::cuda
