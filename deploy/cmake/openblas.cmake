# OpenBLAS as PkgConfig::OPENBLAS, preferring Debian's OpenMP build
# (libopenblas-openmp-dev) when it is installed. That build runs its GEMMs
# on the one OpenMP thread team that oneDNN and the host kernels use; the
# pthread build (Debian's default alternative) keeps a pool of its own whose
# idle threads spin and yield against that team, which on a machine with as
# many cores as threads makes every parallel loop wait for a core. Both
# builds have the soname libopenblas.so.0, so the OpenMP one is linked by
# path (CMake puts its folder on the build run path) and its folder goes
# first on the installed run path. Included by the top-level
# CMakeLists.txt and by KilnConfig.cmake.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::OPENBLAS)
  pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET GLOBAL openblas)
endif()
find_library(KILN_OPENBLAS_OPENMP NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(KILN_OPENBLAS_OPENMP)
  get_filename_component(kiln_openblas_dir ${KILN_OPENBLAS_OPENMP} DIRECTORY)
  set_target_properties(PkgConfig::OPENBLAS PROPERTIES
    INTERFACE_LINK_LIBRARIES ${KILN_OPENBLAS_OPENMP})
  if(KILN_BUILDING_KILN)
    # Kiln's own programs; a program built on the installed package gets the
    # folder on its build run path from CMake.
    list(APPEND CMAKE_INSTALL_RPATH ${kiln_openblas_dir})
    # The same run path in the tree: a padded build run path (for rewriting
    # at install time) would end in an empty entry, which means the working
    # folder.
    set(CMAKE_BUILD_WITH_INSTALL_RPATH ON)
  endif()
  set(KILN_OPENBLAS_BUILD "OpenMP")
else()
  set(KILN_OPENBLAS_BUILD "pthreads (install libopenblas-openmp-dev for one thread team)")
endif()
