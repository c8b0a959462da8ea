// Shim (see ../README.md): ProcessGroupGloo.hpp includes this but uses nothing from it.
#pragma once
