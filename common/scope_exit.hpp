// ScopeExit: runs a function when the scope ends, however it ends (return or exception). For an order of
// teardown that members alone cannot give: helpers an object owns that must end before locals of one of its
// functions do.
#pragma once

#include <utility>

namespace meshrun {

template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() { f_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
};

}  // namespace meshrun
