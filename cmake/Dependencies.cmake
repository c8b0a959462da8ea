# Every third-party dependency is found here, once. All come from Debian packages except LibTorch,
# which comes from the PyPI torch wheel in .venv (pass -DCMAKE_PREFIX_PATH=<torch cmake prefix>).
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)
# OpenSSL: TLS to etcd's members (launcher/etcd/gateway_exchange). Portable builds link it statically, so the
# wheel and the .deb still need nothing but glibc (cmake/Portable.cmake).
if(MESHRUN_PORTABLE)
  set(OPENSSL_USE_STATIC_LIBS TRUE)
endif()
find_package(OpenSSL 3 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
if(MESHRUN_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
endif()

# CUDA + NCCL: detected, never required. GPU code paths compile where they are found.
find_package(CUDAToolkit QUIET)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(CUDAToolkit_FOUND AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
  set(MESHRUN_HAVE_CUDA ON)
  message(STATUS "meshrun: CUDA ${CUDAToolkit_VERSION} and NCCL found: GPU code paths enabled")
else()
  set(MESHRUN_HAVE_CUDA OFF)
  message(STATUS "meshrun: CUDA/NCCL not found: CPU-only build")
endif()

if(MESHRUN_BUILD_TRAINER)
  # Torch's CUDA set-up compiles a GPU probe unless told which architectures to target; on a build
  # machine without a GPU that probe fails, so name the common data-center ones.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  find_package(Torch QUIET)
  if(Torch_FOUND)
    message(STATUS "meshrun: LibTorch ${Torch_VERSION} found: building meshrun-trainer")
  elseif("$ENV{CI}" STREQUAL "true")
    # CI must exercise the trainer: a configuration without it would drop its tests silently.
    message(FATAL_ERROR "meshrun: LibTorch not found and CI=true: run scripts/setup.sh (it installs torch into .venv), or pass -DCMAKE_PREFIX_PATH=<torch cmake dir>; -DMESHRUN_BUILD_TRAINER=OFF builds the launcher alone")
  else()
    message(WARNING "meshrun: LibTorch not found (run scripts/setup.sh, or pass -DCMAKE_PREFIX_PATH to torch's cmake dir): meshrun-trainer is not built")
  endif()
endif()
