# cmake/rocm.cmake - find the optional ROCm pieces for the KFD backend.
#
# libhsakmt (ROCT thunk), hsa-runtime64 and libdrm_amdgpu. Debian 12 ships
# libhsakmt-dev 5.2.3, libhsa-runtime-dev and libdrm-dev; newer ROCm installs
# keep them under /opt/rocm (set ROCM_PATH or CMAKE_PREFIX_PATH). Any piece
# that is missing only disables the backend that needs it: the emulated
# backend always builds.
set(ROCM_PATH "$ENV{ROCM_PATH}" CACHE PATH "ROCm install prefix (optional)")
set(_rocm_hints ${ROCM_PATH} /opt/rocm)

find_path(HSAKMT_INCLUDE_DIR NAMES hsakmt/hsakmt.h hsakmt.h HINTS ${_rocm_hints} PATH_SUFFIXES include)
find_library(HSAKMT_LIBRARY NAMES hsakmt HINTS ${_rocm_hints} PATH_SUFFIXES lib lib64)
find_path(HSA_INCLUDE_DIR NAMES hsa/hsa.h HINTS ${_rocm_hints} PATH_SUFFIXES include)
find_library(HSA_LIBRARY NAMES hsa-runtime64 HINTS ${_rocm_hints} PATH_SUFFIXES lib lib64)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(DRM_AMDGPU QUIET libdrm_amdgpu)
endif()

set(CONCCL_HAVE_HSAKMT OFF)
if(HSAKMT_INCLUDE_DIR AND HSAKMT_LIBRARY)
  set(CONCCL_HAVE_HSAKMT ON)
endif()
set(CONCCL_HAVE_HSA OFF)
if(HSA_INCLUDE_DIR AND HSA_LIBRARY)
  set(CONCCL_HAVE_HSA ON)
endif()
set(CONCCL_HAVE_DRM_AMDGPU OFF)
if(DRM_AMDGPU_FOUND)
  set(CONCCL_HAVE_DRM_AMDGPU ON)
endif()

message(STATUS "ConCCL backends: emu=ON")
message(STATUS "  libhsakmt (KFD backend):      ${CONCCL_HAVE_HSAKMT} ${HSAKMT_LIBRARY}")
message(STATUS "  hsa-runtime64 (HSA signals):  ${CONCCL_HAVE_HSA} ${HSA_LIBRARY}")
message(STATUS "  libdrm_amdgpu:                ${CONCCL_HAVE_DRM_AMDGPU}")
if(NOT CONCCL_HAVE_HSAKMT)
  message(STATUS "  libhsakmt not found: building with the emulated backend only "
                 "(apt-get install libhsakmt-dev, or set ROCM_PATH)")
endif()
