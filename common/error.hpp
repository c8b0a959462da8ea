// The error hierarchy used by every meshrun library. Library code throws these; only main() catches
// (through run_main(), common/run_main.hpp), prints the message and exits with the error's exit_code().
// Messages name the culprit and, where possible, the fix.
#pragma once

#include <stdexcept>
#include <string>

namespace meshrun {

/// Base of all meshrun errors.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// The process exit code when this error ends a program: 1 unless a subclass says otherwise.
  virtual int exit_code() const noexcept { return 1; }
};

/// Invalid user input: flags, config files, environment variables. Exit code 2 at the top level.
class UsageError : public Error {
 public:
  using Error::Error;
  int exit_code() const noexcept override { return 2; }
};

/// Socket-level failures: resolve, connect, read, write.
class NetworkError : public Error {
 public:
  using Error::Error;
};

/// A deadline passed (connect, wait, join, read).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// The peer sent bytes that do not follow the wire protocol.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// The daemon understood the request and refused it (join errors, duplicate ranks, --allow).
class RemoteError : public Error {
 public:
  using Error::Error;
};

}  // namespace meshrun
