// Error types. Library code throws; only main() turns errors into exit codes
// (InputError -> 2, everything else -> 1).
#pragma once

#include <stdexcept>
#include <string>

namespace hetsim {

// Bad input from the user: a file, a field or a flag. Exit code 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure while running on valid input. Exit code 1.
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace hetsim
