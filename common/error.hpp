// The error hierarchy used by every meshrun library. Library code throws these; only main() catches,
// prints the message and maps it to an exit code. Messages name the culprit and, where possible, the fix.
#pragma once

#include <stdexcept>
#include <string>

namespace meshrun {

/// Base of all meshrun errors.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Invalid user input: flags, config files, environment variables. Exit code 2 at the top level.
class UsageError : public Error {
 public:
  using Error::Error;
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
