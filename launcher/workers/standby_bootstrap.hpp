// The standby's Python bootstrap (workers/python/_meshrun_standby.py), compiled into the launcher so that every
// install (build tree, wheel, .deb) carries it, as the hook is (hang/python_hook.hpp).
#pragma once

#include <string_view>

namespace meshrun::launcher {

/// The text of _meshrun_standby.py.
std::string_view standby_bootstrap_source();

}  // namespace meshrun::launcher
