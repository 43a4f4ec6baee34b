// Runs the hetsim command for the end-to-end tests and captures its exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace hetsim::e2e {

struct CommandResult {
  int exit_code = -1;  // the process's exit status; 128 + signal when a signal ended it
  std::string output;
};

enum class Capture { stdout_and_stderr, stdout_only };

// `s` as one word for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `program args...`; stderr goes into the output, or is dropped with stdout_only.
inline CommandResult run_program(const std::string& program, const std::vector<std::string>& args,
                                 Capture capture = Capture::stdout_and_stderr) {
  std::string command = shell_quote(program);
  for (const std::string& a : args) command += " " + shell_quote(a);
  command += capture == Capture::stdout_and_stderr ? " 2>&1" : " 2>/dev/null";
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  // The shell reports a child killed by signal s as exit status 128 + s.
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

// Runs `HETSIM_BINARY args...`.
inline CommandResult run_hetsim(const std::vector<std::string>& args,
                                Capture capture = Capture::stdout_and_stderr) {
  return run_program(HETSIM_BINARY, args, capture);
}

// The command line, for failure messages.
inline std::string command_line(const std::vector<std::string>& args) {
  std::string s = "hetsim";
  for (const std::string& a : args) s += " " + a;
  return s;
}

}  // namespace hetsim::e2e
