// run_main: the one place where a meshrun program turns an exception into a message and an exit code,
// so every binary reports errors the same way: "<program>: error: <message>" on stderr, then
// meshrun::Error::exit_code() (2 for bad input, 1 for the rest, 127 for a missing entrypoint), or 1
// for any other std::exception.
#pragma once

#include <cstdio>
#include <exception>

#include "common/error.hpp"

namespace meshrun {

/// Prints "<program>: error: <message>" on stderr.
inline void print_error(const char* program, const char* message) {
  std::fprintf(stderr, "%s: error: %s\n", program, message);
}

/// Runs `body` (which returns the exit code) and maps what it throws. `body` catches errors of a
/// library outside meshrun itself (LibTorch's c10::Error) when it wants them worded differently.
template <typename Body>
int run_main(const char* program, Body&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    print_error(program, e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    print_error(program, e.what());
    return 1;
  }
}

}  // namespace meshrun
