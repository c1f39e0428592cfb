# Install rules and the CMake package: `cmake --install` puts the public headers, the static
# libraries and the offloadkit command under the prefix, and `find_package(offloadkit CONFIG)`
# then gives the namespaced targets (offloadkit::core, ::reference, ::optimized, ::testing,
# ::plugin_abi, ...). Included once, at the end of the top-level CMakeLists.txt, so that every
# folder's targets exist; a target that is not part of this build is left out.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(OFFLOADKIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/offloadkit)

# ---- public headers -----------------------------------------------------------------------------

# Whole include directories, whatever their layout: every target's INSTALL_INTERFACE is `include`.
file(GLOB offloadkit_include_dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/core/include
  ${PROJECT_SOURCE_DIR}/core/*/include
  ${PROJECT_SOURCE_DIR}/reference/*/include
  ${PROJECT_SOURCE_DIR}/optimized/*/include
  ${PROJECT_SOURCE_DIR}/properties/include
  ${PROJECT_SOURCE_DIR}/properties/*/include
  ${PROJECT_SOURCE_DIR}/traces/include
  ${PROJECT_SOURCE_DIR}/plugin/include)
foreach(dir IN LISTS offloadkit_include_dirs)
  if(IS_DIRECTORY ${dir})
    install(DIRECTORY ${dir}/ DESTINATION include FILES_MATCHING PATTERN "*.h*" PATTERN "*.cuh")
  endif()
endforeach()

# ---- aggregate targets --------------------------------------------------------------------------

# offloadkit_aggregate(<target> <export-name> <targets...>): an INTERFACE target linking those of
# <targets> that this build has; exported as offloadkit::<export-name>, with the same alias in the
# build tree.
function(offloadkit_aggregate target export_name)
  add_library(${target} INTERFACE)
  add_library(offloadkit::${export_name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  foreach(t IN LISTS ARGN)
    if(TARGET ${t})
      target_link_libraries(${target} INTERFACE ${t})
    endif()
  endforeach()
endfunction()

set(offloadkit_features stash region arena activation)
list(TRANSFORM offloadkit_features APPEND _reference OUTPUT_VARIABLE offloadkit_reference_targets)
list(TRANSFORM offloadkit_reference_targets PREPEND offloadkit_)
list(TRANSFORM offloadkit_features APPEND _optimized OUTPUT_VARIABLE offloadkit_optimized_targets)
list(TRANSFORM offloadkit_optimized_targets PREPEND offloadkit_)
list(TRANSFORM offloadkit_features APPEND _battery OUTPUT_VARIABLE offloadkit_battery_targets)
list(TRANSFORM offloadkit_battery_targets PREPEND offloadkit_)

offloadkit_aggregate(offloadkit_reference reference ${offloadkit_reference_targets})
offloadkit_aggregate(offloadkit_optimized optimized ${offloadkit_optimized_targets})
# Not offloadkit_testing: that name is the GoogleTest main of the project's own suites.
offloadkit_aggregate(offloadkit_batteries testing offloadkit_properties offloadkit_workloads
  offloadkit_executor_battery ${offloadkit_battery_targets} offloadkit_traces_battery)

# ---- exported targets ---------------------------------------------------------------------------

set(offloadkit_feature_core_targets ${offloadkit_features})
list(TRANSFORM offloadkit_feature_core_targets APPEND _core)
list(TRANSFORM offloadkit_feature_core_targets PREPEND offloadkit_)

set(offloadkit_export_candidates
  offloadkit_core ${offloadkit_feature_core_targets}
  ${offloadkit_reference_targets} offloadkit_reference
  ${offloadkit_optimized_targets} offloadkit_optimized
  offloadkit_properties offloadkit_workloads offloadkit_executor_battery
  ${offloadkit_battery_targets}
  offloadkit_traces_timeline offloadkit_traces_schedule offloadkit_traces_recorder offloadkit_traces_replay offloadkit_traces
  offloadkit_traces_cli offloadkit_traces_battery offloadkit_batteries
  offloadkit_plugin_abi offloadkit_plugin_sdk offloadkit_plugin_host)
set(offloadkit_exported "")
foreach(t IN LISTS offloadkit_export_candidates)
  if(TARGET ${t})
    list(APPEND offloadkit_exported ${t})
    # offloadkit_stash_core -> offloadkit::stash_core; the aggregates named their own.
    get_target_property(name ${t} EXPORT_NAME)
    if(NOT name)
      string(REGEX REPLACE "^offloadkit_" "" name ${t})
      set_target_properties(${t} PROPERTIES EXPORT_NAME ${name})
    endif()
  endif()
endforeach()

# Consumers compile the headers as C++17 even where their own project does not ask for it.
target_compile_features(offloadkit_core INTERFACE cxx_std_17)

install(TARGETS ${offloadkit_exported} EXPORT offloadkitTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

if(TARGET offloadkit)
  set_target_properties(offloadkit PROPERTIES EXPORT_NAME offloadkit_executable)
  install(TARGETS offloadkit EXPORT offloadkitTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET offloadkit_injection)
  # `offloadkit capture` looks for the injection library in ../lib beside the command, whatever
  # the platform's library directory is called.
  set_target_properties(offloadkit_injection PROPERTIES EXPORT_NAME injection)
  install(TARGETS offloadkit_injection EXPORT offloadkitTargets LIBRARY DESTINATION lib)
endif()

if(TARGET offloadkit_interpose)
  # `offloadkit check --driver-faults` preloads the interposer from ../lib beside the command; its
  # control header is for programs that steer it. Not a link target: it is only ever preloaded.
  install(TARGETS offloadkit_interpose LIBRARY DESTINATION lib)
  install(FILES ${PROJECT_SOURCE_DIR}/interpose/include/offloadkit/interpose/control.h
    DESTINATION include/offloadkit/interpose)
endif()

install(EXPORT offloadkitTargets NAMESPACE offloadkit:: DESTINATION ${OFFLOADKIT_INSTALL_CMAKEDIR})

# ---- package configuration ----------------------------------------------------------------------

set(OFFLOADKIT_INSTALL_BINDIR ${CMAKE_INSTALL_BINDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/offloadkitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/offloadkitConfig.cmake
  INSTALL_DESTINATION ${OFFLOADKIT_INSTALL_CMAKEDIR}
  PATH_VARS OFFLOADKIT_INSTALL_BINDIR)
# 0.x: a minor version may break the interfaces.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/offloadkitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/offloadkitConfig.cmake
  ${PROJECT_BINARY_DIR}/offloadkitConfigVersion.cmake
  DESTINATION ${OFFLOADKIT_INSTALL_CMAKEDIR})
