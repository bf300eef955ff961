# SPDX-License-Identifier: Apache-2.0
# The compiled PyTorch binding (python/ext): libqkvfuse_torch.so, the
# torch.ops.qkvfuse operators registered with TORCH_LIBRARY, calling
# libqkvfuse's public C API. Included by python/CMakeLists.txt.
#
# QKVFUSE_TORCH_EXTENSION: AUTO (default) builds it when ${QKVFUSE_TORCH_PYTHON}
# imports torch, ON requires that, OFF skips it. The extension is built
# against that torch alone (the regular libtorch ABI: python/README.md says
# why not the stable one); the package loads it only under the same
# torch.__version__ and otherwise registers the operators in Python. Its CUDA
# registrations are compiled when torch has CUDA and the CUDA toolkit (nvcc
# and its headers) is found. Defines QKVFUSE_TORCH_EXT_TARGET (empty when not
# built).

set(QKVFUSE_TORCH_EXTENSION "AUTO" CACHE STRING "Build the PyTorch extension: AUTO (when torch imports), ON, OFF")
set(QKVFUSE_TORCH_EXT_TARGET "")
if(QKVFUSE_TORCH_EXTENSION STREQUAL "OFF")
  message(STATUS "qkvfuse: torch extension OFF (QKVFUSE_TORCH_EXTENSION=OFF)")
  return()
endif()
if(NOT QKVFUSE_TORCH_PYTHON)
  message(STATUS "qkvfuse: torch extension not built: no Python interpreter")
  if(QKVFUSE_TORCH_EXTENSION STREQUAL "ON")
    message(FATAL_ERROR "QKVFUSE_TORCH_EXTENSION=ON but no Python interpreter was found")
  endif()
  return()
endif()
execute_process(COMMAND ${QKVFUSE_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/probe_torch.py
                OUTPUT_VARIABLE qkvfuse_torch_probe RESULT_VARIABLE qkvfuse_torch_rc ERROR_QUIET TIMEOUT 300)
if(NOT qkvfuse_torch_rc EQUAL 0)
  message(STATUS "qkvfuse: torch extension not built: ${QKVFUSE_TORCH_PYTHON} does not import torch "
                 "(the Python registration of the operators is used)")
  if(QKVFUSE_TORCH_EXTENSION STREQUAL "ON")
    message(FATAL_ERROR "QKVFUSE_TORCH_EXTENSION=ON but ${QKVFUSE_TORCH_PYTHON} does not import torch "
                        "(with pip: pip install --no-build-isolation . , so that the build sees your torch)")
  endif()
  return()
endif()
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/torch_probe.cmake "${qkvfuse_torch_probe}")
include(${CMAKE_CURRENT_BINARY_DIR}/torch_probe.cmake)

enable_language(CXX)
set(qkvfuse_ext_sources ${CMAKE_CURRENT_LIST_DIR}/qkvfuse_torch.cpp)
set(qkvfuse_ext_cuda false)
if(QKVFUSE_TORCH_CUDA)
  # the toolkit of nvcc (on PATH, CUDACXX or CUDAToolkit_ROOT), whether or not
  # the library itself has the CUDA backend
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE)
    list(APPEND qkvfuse_ext_sources ${CMAKE_CURRENT_LIST_DIR}/qkvfuse_torch_cuda.cpp)
    set(qkvfuse_ext_cuda true)
  else()
    message(STATUS "qkvfuse: torch ${QKVFUSE_TORCH_VERSION} has CUDA ${QKVFUSE_TORCH_CUDA} but no CUDA toolkit "
                   "(nvcc) was found: the extension's CUDA registrations are not built")
  endif()
endif()

add_library(qkvfuse_torch SHARED ${qkvfuse_ext_sources})
set_target_properties(qkvfuse_torch PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF
  CXX_VISIBILITY_PRESET hidden LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python)
target_include_directories(qkvfuse_torch SYSTEM PRIVATE ${QKVFUSE_TORCH_INCLUDE}
  ${QKVFUSE_TORCH_INCLUDE}/torch/csrc/api/include)
target_compile_definitions(qkvfuse_torch PRIVATE _GLIBCXX_USE_CXX11_ABI=${QKVFUSE_TORCH_CXX11_ABI})
target_compile_options(qkvfuse_torch PRIVATE -Wall -Wextra)
# libtorch is the one the importing Python has loaded already (by soname);
# libqkvfuse the one the package loaded with ctypes before this (by soname
# too), so both bindings share one library
target_link_libraries(qkvfuse_torch PRIVATE qkvfuse ${QKVFUSE_TORCH_LIBDIR}/libc10.so
  ${QKVFUSE_TORCH_LIBDIR}/libtorch_cpu.so)
if(qkvfuse_ext_cuda)
  target_include_directories(qkvfuse_torch SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(qkvfuse_torch PRIVATE ${QKVFUSE_TORCH_LIBDIR}/libc10_cuda.so)
endif()
# What the package checks before loading it (qkvfuse/_binding.py).
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/python/libqkvfuse_torch.json CONTENT
  "{\"torch_version\": \"${QKVFUSE_TORCH_VERSION}\", \"cuda\": ${qkvfuse_ext_cuda}}\n")
set(QKVFUSE_TORCH_EXT_TARGET qkvfuse_torch)
message(STATUS "qkvfuse: torch extension ON (torch ${QKVFUSE_TORCH_VERSION}, CUDA kernels ${qkvfuse_ext_cuda})")
