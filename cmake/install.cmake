# cmake/install.cmake - `cmake --install build --prefix P` puts ConCCL where
# other projects find it:
#   P/include/conccl/*.hpp, conccl.h     the public C++ and C headers
#   P/include/conccl/packets/*.hpp       the packet layer (packets/ in the
#                                        source tree); every header includes
#                                        its siblings as "conccl/...", so
#                                        consumers need -IP/include alone
#   P/lib/libconccl.so.0 (+ .so), libconccl.a
#   P/lib/cmake/conccl/concclConfig.cmake  find_package(conccl): the targets
#       conccl::conccl (shared) and conccl::conccl_static, carrying their own
#       include directories and link dependencies
#   P/lib/pkgconfig/conccl.pc            pkg-config --cflags --libs conccl
#   P/bin/sdma-probe
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS conccl conccl_shared EXPORT concclTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS sdma-probe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/conccl DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/packets/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/conccl/packets
        FILES_MATCHING PATTERN "*.hpp")

# A thunk found as the imported target hsakmt::hsakmt must be found again by
# consumers of the static library.
set(CONCCL_CONFIG_DEPENDENCIES "")
if(CONCCL_HAVE_HSAKMT AND TARGET hsakmt::hsakmt)
  set(CONCCL_CONFIG_DEPENDENCIES "find_dependency(hsakmt CONFIG)")
endif()
install(EXPORT concclTargets NAMESPACE conccl:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/conccl)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/concclConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/concclConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/conccl)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/concclConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/concclConfig.cmake ${PROJECT_BINARY_DIR}/concclConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/conccl)

# pkg-config: the shared library carries its own dependencies (DT_NEEDED);
# Libs.private lists what a static link (--static) needs besides.
set(CONCCL_PC_PRIVATE "-lpthread -ldl -lstdc++")
if(CONCCL_HAVE_HSAKMT AND HSAKMT_LIBRARY)
  string(APPEND CONCCL_PC_PRIVATE " ${HSAKMT_LIBRARY}")
endif()
if(CONCCL_HAVE_DRM_AMDGPU)
  list(JOIN DRM_AMDGPU_LINK_LIBRARIES " " _drm_amdgpu_libs)
  string(APPEND CONCCL_PC_PRIVATE " ${_drm_amdgpu_libs}")
endif()
# Relocatable: the prefix is found from the .pc file's own place, so
# `cmake --install build --prefix P` works whatever prefix was configured.
file(RELATIVE_PATH CONCCL_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(${PROJECT_SOURCE_DIR}/cmake/conccl.pc.in ${PROJECT_BINARY_DIR}/conccl.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/conccl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
