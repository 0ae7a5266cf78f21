# LibTorch from PyPI's torch wheel in the virtual environment made by scripts/setup.
# The prefix comes from `python -c 'import torch;print(torch.utils.cmake_prefix_path)'`, so the
# build and the PyTorch-eager peer in bench/ share one LibTorch. Override with
# -DTRAINSCOPE_PYTHON=/path/to/python (the GPU machine uses its own python3).
if(DEFINED ENV{TRAINSCOPE_VENV})
  set(_ts_default_python "$ENV{TRAINSCOPE_VENV}/bin/python")
else()
  set(_ts_default_python "/opt/trainscope/venv/bin/python")  # scripts/setup's default
endif()
set(TRAINSCOPE_PYTHON "${_ts_default_python}" CACHE FILEPATH "Python whose torch provides LibTorch")
if(NOT EXISTS "${TRAINSCOPE_PYTHON}")
  message(FATAL_ERROR "No Python with torch at ${TRAINSCOPE_PYTHON}. Run scripts/setup first, "
                      "or pass -DTRAINSCOPE_PYTHON=/path/to/python whose `import torch` works.")
endif()
execute_process(
  COMMAND "${TRAINSCOPE_PYTHON}" -c "import torch;print(torch.utils.cmake_prefix_path);print(torch.version.cuda or '')"
  OUTPUT_VARIABLE _ts_torch_out RESULT_VARIABLE _ts_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ts_torch_rc EQUAL 0)
  message(FATAL_ERROR "${TRAINSCOPE_PYTHON} cannot import torch: run scripts/setup")
endif()
string(REPLACE "\n" ";" _ts_torch_out "${_ts_torch_out}")
list(GET _ts_torch_out 0 TRAINSCOPE_TORCH_PREFIX)
list(LENGTH _ts_torch_out _n)
set(TRAINSCOPE_TORCH_CUDA "")
if(_n GREATER 1)
  list(GET _ts_torch_out 1 TRAINSCOPE_TORCH_CUDA)
endif()
list(PREPEND CMAKE_PREFIX_PATH "${TRAINSCOPE_TORCH_PREFIX}")

if(TRAINSCOPE_TORCH_CUDA AND NOT TRAINSCOPE_CUDA_ENABLED)
  # LibTorch stays a CUDA build (its CUDA code is linked either way); trainscope's own CUDA
  # sources (CUPTI, NCCL, NVTX wrappers) are left out.
  message(STATUS "trainscope: LibTorch is built for CUDA ${TRAINSCOPE_TORCH_CUDA}, CUDA path is off")
endif()
if(TRAINSCOPE_TORCH_CUDA AND TRAINSCOPE_CUDA_ENABLED)
  if(NOT TRAINSCOPE_TORCH_CUDA VERSION_EQUAL "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
    message(WARNING "torch was built for CUDA ${TRAINSCOPE_TORCH_CUDA} but the toolkit is ${CUDAToolkit_VERSION}; "
                    "CUPTI/NCCL must match torch.version.cuda (see docs/architecture.md)")
  endif()
  # Caffe2's cmake asks for an architecture list; a fixed one keeps configure quiet and cheap.
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
  endif()
endif()

find_package(Torch REQUIRED)
message(STATUS "trainscope: LibTorch ${Torch_VERSION} (CUDA '${TRAINSCOPE_TORCH_CUDA}')")

# One interface target the modules link; keeps TORCH_CXX_FLAGS (ABI) in one place.
add_library(trainscope_torch INTERFACE)
target_link_libraries(trainscope_torch INTERFACE ${TORCH_LIBRARIES})
separate_arguments(_ts_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(trainscope_torch INTERFACE ${_ts_torch_flags})
# CMake's build-tree rpath already points at the wheel's torch/lib, so binaries run without
# LD_LIBRARY_PATH.
