# The libraries wgml links, as imported targets: wgml::wgpu_native (the file named by
# WGML_WGPU_LIBRARY), ZLIB::ZLIB and wgml::jansson. Included by wgml's own CMakeLists.txt and
# by the installed wgmlConfig.cmake, so a build and a find_package link the same way. When
# something is missing, WGML_DEPENDENCY_MISSING says what; the includer decides what to do.
set(WGML_DEPENDENCY_MISSING "")

if(NOT TARGET wgml::wgpu_native)
  if(EXISTS "${WGML_WGPU_LIBRARY}")
    add_library(wgml::wgpu_native SHARED IMPORTED)
    set_target_properties(wgml::wgpu_native PROPERTIES IMPORTED_LOCATION "${WGML_WGPU_LIBRARY}"
                                                       IMPORTED_NO_SONAME TRUE)
  else()
    string(APPEND WGML_DEPENDENCY_MISSING "wgpu-native (no ${WGML_WGPU_LIBRARY}) ")
  endif()
endif()

if(NOT TARGET ZLIB::ZLIB)
  find_package(ZLIB QUIET)
  if(NOT ZLIB_FOUND)
    string(APPEND WGML_DEPENDENCY_MISSING "zlib (apt-get install zlib1g-dev) ")
  endif()
endif()

# jansson ships no CMake package, only a pkg-config file: found here by its header and library.
if(NOT TARGET wgml::jansson)
  find_path(WGML_JANSSON_INCLUDE_DIR jansson.h)
  find_library(WGML_JANSSON_LIBRARY jansson)
  if(WGML_JANSSON_INCLUDE_DIR AND WGML_JANSSON_LIBRARY)
    add_library(wgml::jansson UNKNOWN IMPORTED)
    set_target_properties(wgml::jansson PROPERTIES IMPORTED_LOCATION "${WGML_JANSSON_LIBRARY}"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${WGML_JANSSON_INCLUDE_DIR}")
  else()
    string(APPEND WGML_DEPENDENCY_MISSING "jansson (apt-get install libjansson-dev) ")
  endif()
endif()
