# MESHRUN_PORTABLE: meshrun and meshrun-rendezvous that need nothing from the system but glibc >= 2.34,
# libgcc_s and libm, for the pip wheel and the .deb (preset "package", scripts/build_packages.sh):
#   - libstdc++ is linked statically (-static-libstdc++), so the system's (or a conda env's) does not matter;
#   - spdlog and fmt are compiled in (header-only) instead of loading Debian's libspdlog.so.1.10 and
#     libfmt.so.9, which other distributions do not have;
#   - arc4random, which the static libstdc++ would take from glibc 2.36, comes from packaging/glibc_compat.c.
# `auditwheel show` then names manylinux_2_34: Debian 12, Ubuntu 22.04, RHEL 9 and newer (tests/packaging
# checks the tag). Included after the programs are defined: it changes those two targets only.
option(MESHRUN_PORTABLE "Build meshrun and meshrun-rendezvous for the wheel and the .deb (static libstdc++, spdlog/fmt compiled in)" OFF)
if(NOT MESHRUN_PORTABLE)
  return()
endif()
if(TARGET meshrun-trainer)
  message(FATAL_ERROR "MESHRUN_PORTABLE builds meshrun and meshrun-rendezvous only: add -DMESHRUN_BUILD_TRAINER=OFF "
                      "(or use the preset: cmake --preset package)")
endif()
# Debian's CMake packages describe shared builds (SPDLOG_COMPILED_LIB, FMT_SHARED): without those definitions
# both libraries are header-only, and every symbol the programs use is compiled into them.
set_target_properties(fmt::fmt PROPERTIES INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
set_target_properties(spdlog::spdlog PROPERTIES INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL")
add_library(meshrun_glibc_compat OBJECT ${CMAKE_SOURCE_DIR}/packaging/glibc_compat.c)
foreach(_program meshrun meshrun-rendezvous)
  # NOTE: an imported shared target always puts its .so on the link line; --as-needed drops libspdlog and
  # libfmt, as nothing references them any more. tests/packaging fails if a packaged program still needs one.
  target_link_options(${_program} PRIVATE -static-libstdc++ LINKER:--as-needed LINKER:--wrap=arc4random)
  target_link_libraries(${_program} PRIVATE meshrun_glibc_compat)
endforeach()
message(STATUS "meshrun: portable meshrun and meshrun-rendezvous (static libstdc++, spdlog and fmt compiled in)")
