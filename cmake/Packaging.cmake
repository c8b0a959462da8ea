# What `cmake --install` lays out, and the .deb CPack makes of it (docs/architecture.md, docs/install.md):
#   bin/                                  meshrun, meshrun-rendezvous (meshrun-trainer and its CUDA plugin when built)
#   share/man/man1/                       PROGRAM.1.gz, generated from each program's --help
#   share/bash-completion/completions/    PROGRAM, generated from --help
#   share/zsh/site-functions/             _PROGRAM, generated from --help
#   share/doc/meshrun/                    README.md and docs/
# The pip wheel installs the same tree into the virtual environment (pyproject.toml puts the install prefix
# at the wheel's data root), so bin/ lands on the venv's PATH and share/man on man's path.
include(GNUInstallDirs)

# --- man pages and completions: packaging/cli_docs.py runs each built program with --help ---
# The Python that runs it needs only the standard library (a launcher-only machine's python3 will do).
find_package(Python3 COMPONENTS Interpreter QUIET)
set(MESHRUN_SHARE_DIR ${CMAKE_BINARY_DIR}/packaging/share)
set(_programs meshrun meshrun-rendezvous)
if(TARGET meshrun-trainer)
  list(APPEND _programs meshrun-trainer)
endif()
if(MESHRUN_SANITIZE)
  message(STATUS "meshrun: sanitizer build: no man pages or completions (nothing installs from it)")
elseif(Python3_Interpreter_FOUND)
  set(_docs)
  string(REPLACE ";" "," _see_also "${_programs}")
  foreach(_program IN LISTS _programs)
    set(_outputs ${MESHRUN_SHARE_DIR}/man/man1/${_program}.1 ${MESHRUN_SHARE_DIR}/man/man1/${_program}.1.gz
                 ${MESHRUN_SHARE_DIR}/bash-completion/completions/${_program}
                 ${MESHRUN_SHARE_DIR}/zsh/site-functions/_${_program})
    set(_extra)
    if(_program STREQUAL "meshrun-trainer")
      set(_extra "--extra-section=CONFIGURATION KEYS=--help-config")
    endif()
    # DEPENDS on the program's target: the pages are made again whenever the program is relinked.
    add_custom_command(OUTPUT ${_outputs}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/packaging/cli_docs.py --program ${_program}
              --binary $<TARGET_FILE:${_program}> --version ${PROJECT_VERSION} --out ${MESHRUN_SHARE_DIR}
              --see-also ${_see_also} ${_extra}
      DEPENDS ${_program} ${CMAKE_SOURCE_DIR}/packaging/cli_docs.py
      COMMENT "Man page and completions of ${_program} from its --help"
      VERBATIM)
    list(APPEND _docs ${_outputs})
  endforeach()
  add_custom_target(meshrun_cli_docs ALL DEPENDS ${_docs})
  foreach(_program IN LISTS _programs)
    set(_component Unspecified)  # CMake's name for "no COMPONENT given"
    if(_program STREQUAL "meshrun-trainer")
      set(_component trainer)
    endif()
    install(FILES ${MESHRUN_SHARE_DIR}/man/man1/${_program}.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
            COMPONENT ${_component})
    install(FILES ${MESHRUN_SHARE_DIR}/bash-completion/completions/${_program}
            DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions COMPONENT ${_component})
    install(FILES ${MESHRUN_SHARE_DIR}/zsh/site-functions/_${_program}
            DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/zsh/site-functions COMPONENT ${_component})
  endforeach()
else()
  message(WARNING "meshrun: no python3 found: man pages and shell completions are not generated (apt-get install python3)")
endif()

# --- programs and documentation ---
install(TARGETS meshrun meshrun-rendezvous RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET meshrun-trainer)
  # The trainer runs against the LibTorch it was built with (.venv's torch wheel): the installed copy keeps the
  # path to it (RUNPATH). The CUDA plugin goes next to the executable, where the trainer looks for it first,
  # and keeps the paths to torch's libraries and to the NCCL it was linked with.
  set_target_properties(meshrun-trainer PROPERTIES INSTALL_RPATH "${TORCH_INSTALL_PREFIX}/lib")
  install(TARGETS meshrun-trainer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT trainer)
  if(TARGET meshrun_trainer_cuda)
    get_filename_component(_nccl_dir "${MESHRUN_WHEEL_NCCL}" DIRECTORY)
    set_target_properties(meshrun_trainer_cuda PROPERTIES INSTALL_RPATH "${TORCH_INSTALL_PREFIX}/lib;${_nccl_dir}")
    install(TARGETS meshrun_trainer_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT trainer)
  endif()
endif()
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs FILES_MATCHING PATTERN "*.md")

# Benchmarks and the NCCL benchmark are not packaged: a packaging build does not build them either.
if(MESHRUN_PORTABLE)
  set_property(DIRECTORY ${CMAKE_SOURCE_DIR}/bench PROPERTY EXCLUDE_FROM_ALL TRUE)
  set_property(DIRECTORY ${CMAKE_SOURCE_DIR}/tools/nccl_bench PROPERTY EXCLUDE_FROM_ALL TRUE)
endif()

# --- CPack: the .deb (cpack -G DEB in build-pkg/, or scripts/build_packages.sh) ---
# dpkg-shlibdeps computes Depends from the programs' shared libraries: with MESHRUN_PORTABLE, libc6 and libgcc-s1.
# meshrun-trainer (component "trainer") is never packaged: it needs the torch wheel of the machine that built it
# (`cmake --install` of a full build does install it, with the path to that torch kept in its RUNPATH).
set(CPACK_PACKAGE_NAME meshrun)
set(CPACK_PACKAGE_VENDOR "meshrun")
set(CPACK_PACKAGE_CONTACT "meshrun developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "torchrun-compatible launcher and TCPStore-compatible rendezvous daemon")
set(CPACK_PACKAGE_DESCRIPTION
    "meshrun starts and supervises PyTorch workers on one or many nodes (a drop-in torchrun replacement, \
with meshrun ping and meshrun check for troubleshooting); meshrun-rendezvous is a rendezvous daemon that \
speaks PyTorch's TCPStore protocol. Neither needs torch.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES ON)
# Only the default component goes into the package: meshrun-trainer, its plugin and its page are "trainer".
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};meshrun;Unspecified;/")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
include(CPack)
