// Seeded mutation fuzzer of hetsim's input files: mutates a shipped model, cluster, plan or
// Hugging Face config.json, runs the hetsim command on it in a child process with a time and
// memory limit, and reports every input that does not end in exit code 0 or 2 with a message.
//
// Why the command and not the library in-process: the contract under test is the command's
// (exit 0 or 2 and a message, never a crash, a hang or exit 1), a hang can only be stopped from
// outside the process, and a child per input keeps one input's corruption from the next. The
// sanitizer build's hetsim is itself instrumented, so ASan/UBSan still see the library.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// What is mutated, and the command line that exercises it. "@" in args stands for the mutated
// file. The companions are small so that an unmutated input runs in well under a second: the
// fuzzer's budget goes into many inputs, not into a few large simulations.
enum class Kind { model, cluster, plan, hf_config };

struct Target {
  Kind kind;
  fs::path file;                  // the shipped file that is mutated
  std::vector<std::string> args;  // the hetsim arguments
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::model:
      return "model";
    case Kind::cluster:
      return "cluster";
    case Kind::plan:
      return "plan";
    case Kind::hf_config:
      return "hf-config";
  }
  return "?";
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());  // directory order is not deterministic
  return out;
}

std::vector<Target> targets(const fs::path& src) {
  std::vector<Target> t;
  const std::string cpu_plan = (src / "tests/data/plans/cpu.yaml").string();
  // Models and HF configs: one CPU host (2 devices), data parallel 2, sequence 256; the
  // convolutional networks as a 2 x 1 grid there, and as a 2 x 2 grid on four A100 (two
  // columns: gradients over the columns and over the grid).
  const std::string grid_plan = (src / "tests/fuzz/grid_plan.yaml").string();
  const std::string grid_plan_2x2 = (src / "tests/fuzz/grid_plan_2x2.yaml").string();
  for (const auto& f : files_in(src / "models", ".yaml")) {
    std::ifstream in(f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool cnn = text.find("family: cnn") != std::string::npos;
    t.push_back({Kind::model,
                 f,
                 {"simulate", "--model", "@", "--cluster", "cpu-host", "--plan",
                  cnn ? grid_plan : cpu_plan}});
    if (cnn) {
      t.push_back({Kind::model,
                   f,
                   {"simulate", "--model", "@", "--cluster", "dgx-a100", "--nodes", "1", "--plan",
                    grid_plan_2x2}});
    }
  }
  // The HF configs that load (missing_field.json and unknown_arch.json are bad-input cases).
  for (const auto& f : files_in(src / "tests/data/hf", ".json"))
    if (f.stem() != "missing_field" && f.stem() != "unknown_arch")
      t.push_back({Kind::hf_config,
                   f,
                   {"simulate", "--model", "@", "--cluster", "cpu-host", "--plan", cpu_plan}});
  // Clusters: a 1 MiB all-reduce over every GPU (loader, routes, rings, flow model), and a
  // data-parallel GPT-3 125M iteration on the first two GPUs (the training path).
  const fs::path two_gpu_plan = src / "tests/fuzz/two_gpu_plan.yaml";
  for (const auto& f : files_in(src / "topologies", ".yaml")) {
    if (f.stem() == "link_classes") continue;  // not a cluster (built into the binary)
    t.push_back({Kind::cluster, f, {"collective", "--cluster", "@", "--bytes", "1MiB"}});
    t.push_back(
        {Kind::cluster,
         f,
         {"simulate", "--model", "gpt3-125m", "--cluster", "@", "--plan", two_gpu_plan.string()}});
  }
  // Plans with the model and cluster they were written for. Left out for time: the
  // 64-to-1024-GPU plans (experiments/gpt3-175b-1024.yaml, korthikanti 175b/530b/1t), whose
  // unmutated runs take seconds each (longer under ASan).
  const fs::path ex = src / "experiments";
  t.push_back(
      {Kind::plan,
       ex / "default/llama2-13b-mixed.yaml",
       {"simulate", "--model", "llama2-13b", "--cluster", "mixed-h100-a100", "--plan", "@"}});
  for (const char* p : {"22b-full.yaml", "22b-selective.yaml"})
    t.push_back({Kind::plan,
                 ex / "korthikanti" / p,
                 {"simulate", "--model", "korthikanti-22b", "--cluster", "dgx-a100", "--nodes", "1",
                  "--plan", "@"}});
  t.push_back(
      {Kind::plan,
       ex / "gholami/alexnet-64.yaml",
       {"simulate", "--model", "alexnet", "--cluster", "dgx-a100", "--nodes", "8", "--plan", "@"}});
  t.push_back({Kind::plan,
               src / "tests/data/plans/cpu.yaml",
               {"simulate", "--model", "gpt3-125m", "--cluster", "cpu-host", "--plan", "@"}});
  // The other plans under tests/data/plans are bad-input cases: their mutations test little.
  t.push_back({Kind::plan,
               src / "tests/data/plans/good.yaml",
               {"simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes", "2",
                "--plan", "@"}});
  t.push_back({Kind::plan,
               two_gpu_plan,
               {"simulate", "--model", "gpt3-125m", "--cluster", "dgx-a100", "--nodes", "1",
                "--plan", "@"}});
  return t;
}

// ---- mutations -------------------------------------------------------------------------------

std::string read_text(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (char c : s) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// A scalar value in the text: the span after "key:" (YAML, also inside flow maps) or after
// "\"key\":" (JSON), up to the next ',', '}', ']', '#' or end of line.
struct Span {
  size_t begin, end;
};

std::vector<Span> scalar_spans(const std::string& s) {
  std::vector<Span> spans;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != ':') continue;
    size_t b = i + 1;
    if (b < s.size() && s[b] != ' ') continue;  // "a:b" is not a key (e.g. a range or a URL)
    while (b < s.size() && s[b] == ' ') ++b;
    size_t e = b;
    while (e < s.size() && s[e] != '\n' && s[e] != ',' && s[e] != '}' && s[e] != ']' && s[e] != '#')
      ++e;
    while (e > b && s[e - 1] == ' ') --e;
    if (e > b && s[b] != '{' && s[b] != '[') spans.push_back({b, e});
  }
  return spans;
}

// Values at the edges of what a loader must reject or survive: zero and negatives, large but
// within the loaders' bounds (sim/config/limits.h), beyond 32 and 64 bits, non-finite, the empty
// string, a huge string, and the wrong type.
std::vector<std::string> boundary_values(bool json) {
  std::vector<std::string> v = {"0",
                                "-1",
                                "1",
                                "1e30",
                                "-1e30",
                                "100000",
                                "10000000000000",
                                "2147483648",
                                "4294967296",
                                "9223372036854775808",
                                "1e400",
                                "0.5",
                                "-0"};
  if (json) {
    for (const char* s : {"\"\"", "null", "true", "[1, 2]", "{\"a\": 1}", "\"nan\"", "[]", "{}"})
      v.push_back(s);
    v.push_back("\"" + std::string(100000, 'x') + "\"");
  } else {
    for (const char* s :
         {"\"\"", "nan", ".nan", ".inf", "-.inf", "~", "null", "true", "[1, 2]", "{a: 1}", "[]",
          "{}", "\"0-99999999\"", "1GiB", "-5us", "1e30TFLOPS", "&a 1", "*a", "!!binary AAAA"})
      v.push_back(s);
    v.push_back(std::string(100000, 'x'));
  }
  return v;
}

std::string mutate_once(std::string s, bool json, std::mt19937_64& rng, std::string& what) {
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const int op = static_cast<int>(pick(9));
  std::vector<std::string> lines = split_lines(s);
  auto line_desc = [&](size_t i) {
    std::string l = lines[i].substr(0, 60);
    return "line " + std::to_string(i + 1) + " \"" + l + "\"";
  };
  switch (op) {
    case 0:
    case 1:
    case 2: {  // the likeliest to reach validation: a value replaced by a boundary value
      const auto spans = scalar_spans(s);
      if (spans.empty()) break;
      const Span sp = spans[pick(spans.size())];
      const auto values = boundary_values(json);
      const std::string v = values[pick(values.size())];
      what = "replace \"" + s.substr(sp.begin, std::min<size_t>(sp.end - sp.begin, 40)) +
             "\" at byte " + std::to_string(sp.begin) + " with " +
             (v.size() > 40 ? "a " + std::to_string(v.size()) + "-byte string" : v);
      return s.substr(0, sp.begin) + v + s.substr(sp.end);
    }
    case 3: {  // delete a line (a key, a list item)
      if (lines.empty()) break;
      const size_t i = pick(lines.size());
      what = "delete " + line_desc(i);
      lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
      return join_lines(lines);
    }
    case 4: {  // duplicate a line (a duplicate key or list item)
      if (lines.empty()) break;
      const size_t i = pick(lines.size());
      what = "duplicate " + line_desc(i);
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
      return join_lines(lines);
    }
    case 5: {  // swap two lines
      if (lines.size() < 2) break;
      const size_t i = pick(lines.size()), j = pick(lines.size());
      what = "swap " + line_desc(i) + " and " + line_desc(j);
      std::swap(lines[i], lines[j]);
      return join_lines(lines);
    }
    case 6: {  // truncate
      const size_t at = s.empty() ? 0 : pick(s.size());
      what = "truncate at byte " + std::to_string(at);
      return s.substr(0, at);
    }
    case 7: {  // flip bits of a few bytes
      if (s.empty()) break;
      const size_t n = 1 + pick(4);
      what = "flip bytes at";
      for (size_t k = 0; k < n; ++k) {
        const size_t at = pick(s.size());
        s[at] = static_cast<char>(s[at] ^ (1 << pick(8)));
        what += " " + std::to_string(at);
      }
      return s;
    }
    case 8: {  // a whole-line value replaced by a container (wrong type for a list or a map)
      if (lines.empty()) break;
      const size_t i = pick(lines.size());
      const size_t colon = lines[i].find(": ");
      if (colon == std::string::npos) break;
      const std::string repl = json ? "{\"k\": [1, {\"x\": null}]}" : "{k: [1, {x: ~}]}";
      what = "replace the value of " + line_desc(i) + " with " + repl;
      std::string l = lines[i].substr(0, colon + 2) + repl;
      if (json && !lines[i].empty() && lines[i].back() == ',') l += ",";
      lines[i] = l;
      return join_lines(lines);
    }
  }
  what = "unchanged";
  return s;
}

// ---- running one input -----------------------------------------------------------------------

struct Outcome {
  enum Status { exited, signalled, timed_out } status = exited;
  int code = 0;  // exit code or signal
  double wall_s = 0;
  std::string output;
};

Outcome run_limited(const std::string& program, const std::vector<std::string>& args,
                    const fs::path& out_file, double timeout_s, uint64_t memory_bytes) {
  Outcome o;
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    o.status = Outcome::signalled;
    o.output = std::string("fork failed: ") + std::strerror(errno);
    return o;
  }
  if (pid == 0) {
    const int fd = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    // The address-space limit would stop ASan from mapping its shadow memory; the sanitized
    // child gets an RSS limit through ASAN_OPTIONS instead (set by the parent).
    if (!kSanitized) {
      const rlimit as{memory_bytes, memory_bytes};
      setrlimit(RLIMIT_AS, &as);
    }
    const rlim_t cpu = static_cast<rlim_t>(timeout_s) + 2;  // a backstop if the parent dies
    const rlimit cpu_limit{cpu, cpu + 1};
    setrlimit(RLIMIT_CPU, &cpu_limit);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      o.status = Outcome::timed_out;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  o.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (o.status != Outcome::timed_out) {
    if (WIFEXITED(status)) {
      o.code = WEXITSTATUS(status);
    } else {
      o.status = Outcome::signalled;
      o.code = WTERMSIG(status);
    }
  }
  o.output = read_text(out_file);
  return o;
}

// Empty when the outcome is acceptable; otherwise what is wrong with it.
std::string judge(const Outcome& o) {
  if (o.status == Outcome::timed_out) return "hang: no exit within the time limit";
  if (o.status == Outcome::signalled) return "killed by signal " + std::to_string(o.code);
  for (const char* s : {"AddressSanitizer", "LeakSanitizer", "runtime error:"})
    if (o.output.find(s) != std::string::npos) return std::string("sanitizer report (") + s + ")";
  if (o.code == 0) return "";
  if (o.code != 2) return "exit code " + std::to_string(o.code) + " (expected 0 or 2)";
  const std::string prefix = "hetsim: error: ";
  const size_t at = o.output.find(prefix);
  if (at == std::string::npos) return "exit code 2 without a \"hetsim: error:\" message";
  const size_t b = at + prefix.size();
  const size_t e = o.output.find('\n', b);
  const std::string msg = o.output.substr(b, e == std::string::npos ? e : e - b);
  if (msg.find_first_not_of(" \t") == std::string::npos) return "exit code 2 with an empty message";
  return "";
}

struct Options {
  uint64_t seed = 1;
  long iterations = 100000;
  double budget_s = 60;
  double timeout_s = kSanitized ? 20 : 5;
  uint64_t memory_mib = 2048;
  std::optional<long> only;
  std::optional<fs::path> keep;
  std::string hetsim = HETSIM_BINARY;
  fs::path source = HETSIM_SOURCE_DIR;
};

void usage() {
  std::cerr << "usage: hetsim_fuzz_inputs [--seed S] [--iterations N] [--budget-s T] "
               "[--timeout-s T] [--memory-mib M] [--only I] [--keep DIR]\n"
               "Input I of seed S is the same on every run: --seed S --only I --keep DIR writes "
               "it to DIR and prints its command.\n";
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    try {
      if (a == "--seed")
        o.seed = std::stoull(v);
      else if (a == "--iterations")
        o.iterations = std::stol(v);
      else if (a == "--budget-s")
        o.budget_s = std::stod(v);
      else if (a == "--timeout-s")
        o.timeout_s = std::stod(v);
      else if (a == "--memory-mib")
        o.memory_mib = std::stoull(v);
      else if (a == "--only")
        o.only = std::stol(v);
      else if (a == "--keep")
        o.keep = v;
      else
        return false;
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}

std::string shell_word(const std::string& s) {
  if (s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-=") ==
      std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, opt)) {
    usage();
    return 2;
  }
  if (kSanitized) {
    // The sanitized child's memory limit, and a report instead of a silent abort.
    std::string asan = std::getenv("ASAN_OPTIONS") ? std::getenv("ASAN_OPTIONS") : "";
    asan += std::string(asan.empty() ? "" : ":") +
            "hard_rss_limit_mb=" + std::to_string(opt.memory_mib) + ":allocator_may_return_null=0";
    setenv("ASAN_OPTIONS", asan.c_str(), 1);
  }
  const std::vector<Target> all = targets(opt.source);
  const fs::path dir =
      opt.keep ? *opt.keep
               : fs::temp_directory_path() / ("hetsim-fuzz-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const uint64_t memory_bytes = opt.memory_mib << 20;

  // Every target unmutated first: a companion that does not run makes every mutation of it
  // meaningless, so that is a failure of the fuzzer's own set-up.
  int failures = 0;
  if (!opt.only) {
    for (size_t t = 0; t < all.size(); ++t) {
      const fs::path in = dir / ("base-" + std::to_string(t) + all[t].file.extension().string());
      fs::copy_file(all[t].file, in, fs::copy_options::overwrite_existing);
      std::vector<std::string> args = all[t].args;
      for (auto& a : args)
        if (a == "@") a = in.string();
      const Outcome o =
          run_limited(opt.hetsim, args, dir / "base.out", opt.timeout_s, memory_bytes);
      if (o.status != Outcome::exited || o.code != 0) {
        ++failures;
        std::cout << "SET-UP: the unmutated " << all[t].file.string() << " does not run (exit "
                  << o.code << ", " << o.wall_s << " s):\n"
                  << o.output.substr(0, 2000) << "\n";
      }
    }
  }

  const auto t0 = Clock::now();
  long ran = 0, exit0 = 0, exit2 = 0;
  const long first = opt.only ? *opt.only : 0;
  const long last = opt.only ? *opt.only + 1 : opt.iterations;
  for (long i = first; i < last; ++i) {
    if (!opt.only && std::chrono::duration<double>(Clock::now() - t0).count() > opt.budget_s) break;
    // Input i depends only on (seed, i), so any one can be rerun alone.
    std::seed_seq seq{static_cast<uint32_t>(opt.seed), static_cast<uint32_t>(opt.seed >> 32),
                      static_cast<uint32_t>(i)};
    std::mt19937_64 rng(seq);
    const Target& t = all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng)];
    const bool json = t.file.extension() == ".json";
    std::string text = read_text(t.file);
    std::string mutations;
    const int n = 1 + static_cast<int>(std::uniform_int_distribution<int>(0, 2)(rng));
    for (int k = 0; k < n; ++k) {
      std::string what;
      text = mutate_once(text, json, rng, what);
      mutations += (k ? "; " : "") + what;
    }
    const fs::path in = dir / ("input-" + std::to_string(i) + t.file.extension().string());
    {
      std::ofstream out(in, std::ios::binary);
      out << text;
    }
    std::vector<std::string> args = t.args;
    for (auto& a : args)
      if (a == "@") a = in.string();
    const Outcome o = run_limited(opt.hetsim, args, dir / "out.txt", opt.timeout_s, memory_bytes);
    ++ran;
    const std::string bad = judge(o);
    if (o.status == Outcome::exited && o.code == 0) ++exit0;
    if (o.status == Outcome::exited && o.code == 2) ++exit2;
    std::string cmd = "hetsim";
    for (const auto& a : args) cmd += " " + shell_word(a);
    if (!bad.empty() || opt.only) {
      if (!bad.empty()) ++failures;
      std::cout << (bad.empty() ? "OK" : "FINDING") << " input " << i << " (seed " << opt.seed
                << "): " << (bad.empty() ? "exit " + std::to_string(o.code) : bad) << " after "
                << o.wall_s << " s\n  " << kind_name(t.kind) << " " << t.file.string()
                << "\n  mutations: " << mutations << "\n  reproduce: hetsim_fuzz_inputs --seed "
                << opt.seed << " --only " << i << " --keep DIR, then: " << cmd
                << "\n  output: " << o.output.substr(0, 600) << (o.output.size() > 600 ? "..." : "")
                << "\n";
    }
    if (bad.empty() && !opt.keep) fs::remove(in);
  }
  std::cout << "fuzz: seed " << opt.seed << ", " << ran << " inputs over " << all.size()
            << " targets in " << std::chrono::duration<double>(Clock::now() - t0).count()
            << " s: " << exit0 << " ran (exit 0), " << exit2 << " rejected (exit 2), " << failures
            << " finding(s)" << (kSanitized ? " [sanitized build]" : "") << "\n";
  if (!opt.keep) fs::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
