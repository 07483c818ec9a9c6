# cmake/rocm.cmake - find the optional ROCm pieces for the KFD backend.
#
# libhsakmt (ROCT thunk), hsa-runtime64 and libdrm_amdgpu. Debian 12 ships
# libhsakmt-dev 5.2.3, libhsa-runtime-dev and libdrm-dev; newer ROCm installs
# keep them under /opt/rocm (set ROCM_PATH or CMAKE_PREFIX_PATH). Any piece
# that is missing only disables the backend that needs it: the emulated
# backend always builds.
set(ROCM_PATH "$ENV{ROCM_PATH}" CACHE PATH "ROCm install prefix (optional)")
set(_rocm_hints ${ROCM_PATH} /opt/rocm)

# libhsakmt. Debian's libhsakmt-dev 5.2.3 installs /usr/include/hsakmt.h and
# a shared libhsakmt.so.1; ROCm >= 6 installs <rocm>/include/hsakmt/hsakmt.h
# and (from 6.3) a static libhsakmt.a. Both ship a CMake package whose
# imported target hsakmt::hsakmt carries the static library's own link
# dependencies (libdrm, libdrm_amdgpu, numa, dl), so it is preferred.
find_package(hsakmt CONFIG QUIET HINTS ${_rocm_hints} PATH_SUFFIXES lib/cmake/hsakmt lib64/cmake/hsakmt)
find_path(HSAKMT_INCLUDE_DIR NAMES hsakmt/hsakmt.h hsakmt.h HINTS ${_rocm_hints} PATH_SUFFIXES include)
find_library(HSAKMT_LIBRARY NAMES hsakmt HINTS ${_rocm_hints} PATH_SUFFIXES lib lib64)
find_path(HSA_INCLUDE_DIR NAMES hsa/hsa.h HINTS ${_rocm_hints} PATH_SUFFIXES include)
find_library(HSA_LIBRARY NAMES hsa-runtime64 HINTS ${_rocm_hints} PATH_SUFFIXES lib lib64)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(DRM_AMDGPU QUIET libdrm_amdgpu)
endif()

option(CONCCL_USE_HSAKMT "Build the KFD backend's libhsakmt layer when libhsakmt is found" ON)
set(CONCCL_HAVE_HSAKMT OFF)
set(CONCCL_HSAKMT_LINK "")         # what to link: hsakmt::hsakmt, or the library and its dependencies
set(CONCCL_HSAKMT_DEFINITIONS "")  # CONCCL_HSAKMT_NESTED_HEADER, CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT, ...
set(CONCCL_HSAKMT_DESCRIPTION "not found")
if(NOT CONCCL_USE_HSAKMT)
  set(CONCCL_HSAKMT_DESCRIPTION "disabled by -DCONCCL_USE_HSAKMT=OFF")
elseif(HSAKMT_INCLUDE_DIR AND (TARGET hsakmt::hsakmt OR HSAKMT_LIBRARY))
  if(TARGET hsakmt::hsakmt)
    set(CONCCL_HSAKMT_LINK hsakmt::hsakmt)
    get_target_property(_hsakmt_loc hsakmt::hsakmt LOCATION)
  else()
    set(CONCCL_HSAKMT_LINK ${HSAKMT_LIBRARY})
    set(_hsakmt_loc ${HSAKMT_LIBRARY})
    if(HSAKMT_LIBRARY MATCHES "\\.a$")
      # A static thunk without its CMake package: add what it links against
      # (ROCR-Runtime libhsakmt/CMakeLists.txt: drm, drm_amdgpu, numa, dl, rt).
      find_library(NUMA_LIBRARY NAMES numa)
      if(PkgConfig_FOUND)
        pkg_check_modules(HSAKMT_DRM QUIET libdrm libdrm_amdgpu)
      endif()
      list(APPEND CONCCL_HSAKMT_LINK ${HSAKMT_DRM_LINK_LIBRARIES} ${NUMA_LIBRARY} Threads::Threads ${CMAKE_DL_LIBS} rt)
    endif()
  endif()
  get_filename_component(_hsakmt_file "${_hsakmt_loc}" NAME)
  if(EXISTS "${HSAKMT_INCLUDE_DIR}/hsakmt/hsakmt.h")
    list(APPEND CONCCL_HSAKMT_DEFINITIONS CONCCL_HSAKMT_NESTED_HEADER)
    set(_hsakmt_include "#include <hsakmt/hsakmt.h>")
  else()
    set(_hsakmt_include "#include <hsakmt.h>")
  endif()

  # Probe what this thunk offers, by compiling and linking against it (a
  # header that declares something the library lacks fails here, not at
  # run time). Re-run on every configure so a changed ROCM_PATH is seen.
  include(CheckCXXSourceCompiles)
  include(CMakePushCheckState)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_INCLUDES ${HSAKMT_INCLUDE_DIR})
  set(CMAKE_REQUIRED_LIBRARIES ${CONCCL_HSAKMT_LINK})
  set(CMAKE_REQUIRED_QUIET ON)
  unset(CONCCL_HSAKMT_LINKS CACHE)
  check_cxx_source_compiles("${_hsakmt_include}
    int main() { HsaVersionInfo v; return hsaKmtOpenKFD() == HSAKMT_STATUS_SUCCESS ? (int)hsaKmtGetVersion(&v) : 1; }"
    CONCCL_HSAKMT_LINKS)
  # hsaKmtCreateQueueExt + HSA_QUEUE_SDMA_BY_ENG_ID: ROCR-Runtime commit
  # 2f588a2 (2024-08), first released in ROCm 6.3; not in Debian's 5.2.3.
  unset(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT CACHE)
  check_cxx_source_compiles("${_hsakmt_include}
    int main() {
      HsaQueueResource r;
      return (int)hsaKmtCreateQueueExt(0, HSA_QUEUE_SDMA_BY_ENG_ID, 100, HSA_QUEUE_PRIORITY_NORMAL, 0,
                                       nullptr, 0, nullptr, &r);
    }" CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
  cmake_pop_check_state()

  if(CONCCL_HSAKMT_LINKS)
    set(CONCCL_HAVE_HSAKMT ON)
    list(APPEND CONCCL_HSAKMT_DEFINITIONS "CONCCL_HSAKMT_VERSION=\"${_hsakmt_file}\"")
    set(CONCCL_HSAKMT_DESCRIPTION "${_hsakmt_file}, ${_hsakmt_include}")
    if(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
      list(APPEND CONCCL_HSAKMT_DEFINITIONS CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
      string(APPEND CONCCL_HSAKMT_DESCRIPTION ", hsaKmtCreateQueueExt: yes")
    else()
      string(APPEND CONCCL_HSAKMT_DESCRIPTION ", hsaKmtCreateQueueExt: no (queues cannot be pinned to engines)")
    endif()
  else()
    set(CONCCL_HSAKMT_DESCRIPTION "found ${HSAKMT_INCLUDE_DIR} and ${_hsakmt_loc}, but a test program does not link against them")
  endif()
endif()
set(CONCCL_HAVE_HSA OFF)
if(HSA_INCLUDE_DIR AND HSA_LIBRARY)
  set(CONCCL_HAVE_HSA ON)
endif()
# libdrm_amdgpu: buffer objects the KFD backend shares between processes
# (src/backends/kfd/kfd_share_sys.cpp); -DCONCCL_USE_DRM_AMDGPU=OFF builds
# without it, as on a machine that lacks libdrm-dev.
option(CONCCL_USE_DRM_AMDGPU "Share KFD memory between processes through libdrm_amdgpu when found" ON)
set(CONCCL_HAVE_DRM_AMDGPU OFF)
if(DRM_AMDGPU_FOUND AND CONCCL_USE_DRM_AMDGPU)
  set(CONCCL_HAVE_DRM_AMDGPU ON)
endif()

message(STATUS "ConCCL backends: emu=ON")
message(STATUS "  libhsakmt (KFD backend):      ${CONCCL_HAVE_HSAKMT} (${CONCCL_HSAKMT_DESCRIPTION})")
message(STATUS "  hsa-runtime64 (HSA signals):  ${CONCCL_HAVE_HSA} ${HSA_LIBRARY}")
message(STATUS "  libdrm_amdgpu (KFD sharing):  ${CONCCL_HAVE_DRM_AMDGPU}")
if(NOT CONCCL_HAVE_HSAKMT)
  message(STATUS "  libhsakmt not usable: the KFD backend's sysfs and policy parts are built and tested, "
                 "open_device(kfd) returns 'unavailable' (apt-get install libhsakmt-dev, or set ROCM_PATH)")
endif()
