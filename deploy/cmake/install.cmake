# The installable SDK: `cmake --install build --prefix P` gives the client's
# headers and libraries, P/lib/cmake/Kiln/KilnConfig.cmake with the imported
# targets Kiln::client, Kiln::tensor and Kiln::embedded, and P/lib/pkgconfig/
# kiln.pc (the client and the lazy tensors). Included by the top-level
# CMakeLists.txt.
include(CMakePackageConfigHelpers)

# The public targets, under the names a program outside the tree uses; the
# same names work after add_subdirectory.
set_target_properties(kiln_client PROPERTIES EXPORT_NAME client)
set_target_properties(kiln_tensor PROPERTIES EXPORT_NAME tensor)
set_target_properties(kiln_embedded PROPERTIES EXPORT_NAME embedded)
set_target_properties(kiln_npy PROPERTIES EXPORT_NAME npy)
add_library(Kiln::client ALIAS kiln_client)
add_library(Kiln::tensor ALIAS kiln_tensor)
add_library(Kiln::embedded ALIAS kiln_embedded)
add_library(Kiln::npy ALIAS kiln_npy)

# Static libraries: everything the public targets link travels with them.
get_property(kiln_backend_targets GLOBAL PROPERTY KILN_BACKEND_TARGETS)
set(kiln_installed_targets
  kiln_base kiln_logging kiln_proto kiln_grpc_proto kiln_ir kiln_ir_proto kiln_passes
  kiln_client kiln_tensor kiln_npy
  kiln_runtime kiln_host ${kiln_backend_targets} kiln_backends kiln_service kiln_embedded)
install(TARGETS ${kiln_installed_targets} EXPORT KilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${KILN_INSTALL_INCLUDEDIR})
install(TARGETS kiln kiln-server RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers a client program reaches: the client, the IR it builds modules
# with, the base layer, the embedded service's entry point, the wire form.
foreach(dir base compiler/ir client embedded)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/
    DESTINATION ${KILN_INSTALL_INCLUDEDIR}/${dir}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.def" PATTERN "*_test_util.h" EXCLUDE)
endforeach()
install(FILES
  ${PROJECT_BINARY_DIR}/proto/kiln/v1/hlo.pb.h
  ${PROJECT_BINARY_DIR}/proto/kiln/v1/service.pb.h
  ${PROJECT_BINARY_DIR}/proto/kiln/v1/service.grpc.pb.h
  DESTINATION ${KILN_INSTALL_INCLUDEDIR}/kiln/v1)

set(kiln_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${kiln_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/KilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/KilnConfig.cmake INSTALL_DESTINATION ${kiln_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/KilnConfig.cmake ${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/openblas.cmake DESTINATION ${kiln_cmake_dir})

# The .pc file finds the prefix from its own place, so it stays right for
# any --prefix given at install time.
string(REGEX REPLACE "[^/]+" ".." kiln_pc_up "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(${CMAKE_CURRENT_LIST_DIR}/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
