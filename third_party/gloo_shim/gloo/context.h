// Shim (see ../README.md): gloo::Context is only held through std::shared_ptr by the c10d header.
#pragma once

#include <chrono>

namespace gloo {

class Context {
 public:
  // Declared for ProcessGroupGloo::setTimeout's inline body; never called from trainer code.
  void setTimeout(std::chrono::milliseconds timeout);
};

}  // namespace gloo
