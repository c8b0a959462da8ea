# meshrun_warnings: strict warnings for our own targets only (never applied to LibTorch or Boost headers,
# which are included as SYSTEM).
add_library(meshrun_warnings INTERFACE)
target_compile_options(meshrun_warnings INTERFACE -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic
  -Wimplicit-fallthrough)
if(MESHRUN_WERROR)
  target_compile_options(meshrun_warnings INTERFACE -Werror)
endif()
