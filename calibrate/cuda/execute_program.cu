// Parses the program file of hetsim-execute-cuda; see execute_program.h.
#include "execute_program.h"

#include <fstream>
#include <sstream>

#include "lt_matmul.h"
#include "memory_kernels.h"

namespace hetsim::calibrate::cuda {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

class Reader {
 public:
  Reader(const std::string& file, int line) : file_(file), line_(line) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ProgramError(file_ + ":" + std::to_string(line_) + ": " + what);
  }
  std::int64_t whole(const std::string& field, const std::string& text, std::int64_t lo) const {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size())
      fail(field + ": expected a whole number, got \"" + text + "\"");
    if (v < lo) fail(field + ": expected at least " + std::to_string(lo) + ", got " + text);
    return v;
  }
  double number(const std::string& field, const std::string& text) const {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || !(v >= 0))
      fail(field + ": expected seconds or bytes >= 0, got \"" + text + "\"");
    return v;
  }
  bool flag(const std::string& field, const std::string& text) const {
    if (text != "0" && text != "1") fail(field + ": expected 0 or 1, got \"" + text + "\"");
    return text == "1";
  }

 private:
  const std::string& file_;
  int line_;
};

ProgramOpKind kind_from(const Reader& r, const std::string& text) {
  if (text == "gemm") return ProgramOpKind::gemm;
  if (text == "attention_forward") return ProgramOpKind::attention_forward;
  if (text == "attention_backward") return ProgramOpKind::attention_backward;
  if (text == "memory") return ProgramOpKind::memory;
  r.fail("kind: expected gemm, attention_forward, attention_backward or memory, got \"" + text +
         "\"");
}

}  // namespace

const char* kind_name(ProgramOpKind kind) {
  switch (kind) {
    case ProgramOpKind::gemm:
      return "gemm";
    case ProgramOpKind::attention_forward:
      return "attention_forward";
    case ProgramOpKind::attention_backward:
      return "attention_backward";
    case ProgramOpKind::memory:
      return "memory";
  }
  return "?";
}

Program parse_program(const std::string& text, const std::string& file) {
  Program p;
  std::stringstream in(text);
  std::string line;
  int number = 0;
  bool magic = false, columns = false, have_precision = false, have_predicted = false;
  long long declared = -1;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const Reader r(file, number);
    if (!magic) {
      if (line != kProgramMagic)
        r.fail(std::string("not a hetsim execute program: expected \"") + kProgramMagic +
               "\", got \"" + line + "\"");
      magic = true;
      continue;
    }
    const std::vector<std::string> f = split(line);
    if (!columns) {
      if (line == kProgramColumns) {
        if (!have_precision || !have_predicted || declared < 0)
          r.fail("the op rows start before the precision, predicted_iteration_s and ops lines");
        columns = true;
      } else if (f.size() == 2 && f[0] == "precision") {
        try {
          gemm_type_from_name(f[1]);
        } catch (const std::exception&) {
          r.fail("precision: expected fp32, fp16, bf16 or fp8, got \"" + f[1] + "\"");
        }
        p.precision = f[1];
        have_precision = true;
      } else if (f.size() == 2 && f[0] == "predicted_iteration_s") {
        p.predicted_iteration_s = r.number("predicted_iteration_s", f[1]);
        have_predicted = true;
      } else if (f.size() == 2 && f[0] == "ops") {
        declared = r.whole("ops", f[1], 1);
      } else {
        r.fail("expected precision,X / predicted_iteration_s,X / ops,N or the column line \"" +
               std::string(kProgramColumns) + "\", got \"" + line + "\"");
      }
      continue;
    }
    if (f.size() != 18)
      r.fail("expected 18 fields (" + std::string(kProgramColumns) + "), got " +
             std::to_string(f.size()));
    ProgramOp op;
    op.task = r.whole("task", f[0], 0);
    op.segment = r.whole("segment", f[1], 0);
    op.op = r.whole("op", f[2], 0);
    op.kind = kind_from(r, f[3]);
    op.name = f[4];
    if (op.name.empty()) r.fail("name: empty");
    const bool gemm = op.kind == ProgramOpKind::gemm, memory = op.kind == ProgramOpKind::memory;
    const bool attention = !gemm && !memory;
    op.m = r.whole("m", f[5], gemm ? 1 : 0);
    op.n = r.whole("n", f[6], gemm ? 1 : 0);
    op.k = r.whole("k", f[7], gemm ? 1 : 0);
    op.batch = r.whole("batch", f[8], attention ? 1 : 0);
    op.heads = r.whole("heads", f[9], attention ? 1 : 0);
    op.seq = r.whole("seq", f[10], attention ? 1 : 0);
    op.head_dim = r.whole("head_dim", f[11], attention ? 1 : 0);
    op.causal = r.flag("causal", f[12]);
    op.fused = r.flag("fused", f[13]);
    op.bytes = r.number("bytes", f[14]);
    op.memory_kernel = f[15];
    if (memory) {
      try {
        memory_kernel_info(op.memory_kernel);
      } catch (const std::exception& e) {
        r.fail("memory_kernel: " + std::string(e.what()));
      }
      if (op.bytes <= 0) r.fail("bytes: a memory op moves some bytes, got " + f[14]);
    }
    op.predicted_s = r.number("predicted_s", f[16]);
    try {
      gemm_type_from_name(f[17]);
    } catch (const std::exception&) {
      r.fail("precision: expected fp32, fp16, bf16 or fp8, got \"" + f[17] + "\"");
    }
    op.precision = f[17];
    p.ops.push_back(std::move(op));
  }
  const Reader end(file, number);
  if (!magic) end.fail("empty program");
  if (!columns) end.fail(std::string("no column line \"") + kProgramColumns + "\"");
  if (static_cast<long long>(p.ops.size()) != declared)
    end.fail("ops," + std::to_string(declared) + " declared, " + std::to_string(p.ops.size()) +
             " op rows found (a truncated file?)");
  return p;
}

Program read_program(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ProgramError(file + ": cannot read the program");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_program(ss.str(), file);
}

}  // namespace hetsim::calibrate::cuda
