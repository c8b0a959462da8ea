// Shim (see ../../README.md): only pointers to these types appear in the c10d header.
#pragma once

namespace gloo::transport {
class Device;
class UnboundBuffer;
}  // namespace gloo::transport
