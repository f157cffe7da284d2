# Optional CUDA backend (issue 6), included from the top-level CMakeLists.txt right
# after the options. Defines SPECPIPE_CUDA (ON when nvcc is found) and, when it is ON,
# enables the CUDA language for sm_90 (H100/H200) and finds the toolkit libraries
# (CUDA::cudart_static, CUDA::cublasLt).
#
# nvcc need not be on PATH: /usr/local/cuda/bin/nvcc is used when no compiler is given
# (CMAKE_CUDA_COMPILER or $CUDACXX).
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
   AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_specpipe_cuda_default ON)
else()
  set(_specpipe_cuda_default OFF)
endif()
option(SPECPIPE_CUDA "Build the CUDA kernels and GPU tools (needs nvcc)" ${_specpipe_cuda_default})

if(SPECPIPE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "SPECPIPE_CUDA is ON but no CUDA compiler was found "
                        "(set CMAKE_CUDA_COMPILER or turn SPECPIPE_CUDA off)")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper: the GPU hosts are H100 / H200
  endif()
  enable_language(CUDA)
  # nvcc 13 accepts -std=c++20 (any nvcc from 12.0 does), but CMake 3.25's NVIDIA module
  # stops at CUDA17: tell it the flag, and keep .cu files at the host code's C++20.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION
     AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "specpipe: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "sm_${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "specpipe: CUDA backend OFF")
endif()

# Compile options of specpipe's .cu files: no FMA contraction (as -ffp-contract=off on
# the host; kernels ask for fmaf where they want it), warnings as errors with
# SPECPIPE_WERROR, host-side flags as for C++.
function(specpipe_cuda_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false -Xcompiler=-ffp-contract=off,-Wall,-Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${SPECPIPE_WERROR}>>:-Werror=all-warnings>)
endfunction()
