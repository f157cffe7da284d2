# The plugin SDK as a CMake package (docs/PLUGIN_SDK.md, "Building against the SDK").
#
#   specpipe::sdk     INTERFACE target: include/specpipe/plugin.h, plugin.hpp, and
#                     dlpack::dlpack (dlpack/dlpack.h, which plugin.h includes)
#
# Installed by the `sdk` component alone, so that
#
#   cmake --install <build> --component sdk --prefix <prefix>
#
# gives an out-of-tree project `find_package(specpipeSDK REQUIRED)`, the target
# specpipe::sdk and the function specpipe_add_plugin(<name> SOURCES ...). Layout:
#   <prefix>/include/specpipe/plugin.h, plugin.hpp
#   <prefix>/<libdir>/cmake/specpipeSDK/specpipeSDKConfig.cmake, ...ConfigVersion.cmake,
#                                       specpipeSDKTargets.cmake, specpipeSDKPlugin.cmake
# The package version is the project's; SPECPIPE_PLUGIN_ABI_VERSION (plugin.h) is what the
# loader checks, and the package config exposes it as specpipeSDK_ABI_VERSION.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(specpipe_sdk INTERFACE)
add_library(specpipe::sdk ALIAS specpipe_sdk)
set_target_properties(specpipe_sdk PROPERTIES EXPORT_NAME sdk)
target_include_directories(specpipe_sdk INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(specpipe_sdk INTERFACE dlpack::dlpack)

set(_specpipe_sdk_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/specpipeSDK")
set(_specpipe_sdk_gen "${PROJECT_BINARY_DIR}/specpipeSDK")

file(STRINGS "${PROJECT_SOURCE_DIR}/include/specpipe/plugin.h" _specpipe_abi_line
     REGEX "#define SPECPIPE_PLUGIN_ABI_VERSION [0-9]+")
string(REGEX REPLACE ".*SPECPIPE_PLUGIN_ABI_VERSION ([0-9]+).*" "\\1" SPECPIPE_SDK_ABI_VERSION "${_specpipe_abi_line}")

# The package config: finds dlpack the way this project does (its own CMake config, as
# Debian's libdlpack-dev installs it), then the exported target and the helper function.
file(WRITE "${_specpipe_sdk_gen}/specpipeSDKConfig.cmake.in" [=[
@PACKAGE_INIT@

include(CMakeFindDependencyMacro)
find_dependency(dlpack)

include("${CMAKE_CURRENT_LIST_DIR}/specpipeSDKTargets.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/specpipeSDKPlugin.cmake")

set(specpipeSDK_ABI_VERSION @SPECPIPE_SDK_ABI_VERSION@)
check_required_components(specpipeSDK)
]=])

# specpipe_add_plugin(<name> SOURCES <files...>): a SHARED library built the way the loader
# expects: hidden visibility, every symbol resolved at link time (the host dlopen()s with
# RTLD_NOW), and only specpipe_plugin_entry in the dynamic symbol table (a version script;
# -fvisibility alone leaves libstdc++'s template instantiations exported).
file(WRITE "${_specpipe_sdk_gen}/specpipeSDKPlugin.cmake" [=[
function(specpipe_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "specpipe_add_plugin(${name}): SOURCES is required")
  endif()
  add_library(${name} SHARED ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE specpipe::sdk)
  set_target_properties(${name} PROPERTIES
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  set(map "${CMAKE_CURRENT_BINARY_DIR}/${name}_exports.map")
  file(WRITE "${map}" "{\n  global: specpipe_plugin_entry;\n  local: *;\n};\n")
  target_link_options(${name} PRIVATE -Wl,--no-undefined -Wl,--version-script=${map})
endfunction()
]=])

configure_package_config_file("${_specpipe_sdk_gen}/specpipeSDKConfig.cmake.in"
  "${_specpipe_sdk_gen}/specpipeSDKConfig.cmake"
  INSTALL_DESTINATION "${_specpipe_sdk_cmake_dir}")
# 0.x: a new minor version may change the SDK.
write_basic_package_version_file("${_specpipe_sdk_gen}/specpipeSDKConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)

install(FILES "${PROJECT_SOURCE_DIR}/include/specpipe/plugin.h" "${PROJECT_SOURCE_DIR}/include/specpipe/plugin.hpp"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/specpipe" COMPONENT sdk)
install(TARGETS specpipe_sdk EXPORT specpipeSDKTargets COMPONENT sdk)
install(EXPORT specpipeSDKTargets NAMESPACE specpipe:: DESTINATION "${_specpipe_sdk_cmake_dir}" COMPONENT sdk)
install(FILES "${_specpipe_sdk_gen}/specpipeSDKConfig.cmake" "${_specpipe_sdk_gen}/specpipeSDKConfigVersion.cmake"
              "${_specpipe_sdk_gen}/specpipeSDKPlugin.cmake"
        DESTINATION "${_specpipe_sdk_cmake_dir}" COMPONENT sdk)
