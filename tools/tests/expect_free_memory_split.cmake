# `offloadkit check --free-memory only|without` splits the built-in batteries in two: every
# listed property is on exactly one side, and the side that reads the device's free memory is
# exactly the properties that do (executor::device_memory(...).free): the region battery's
# release, swap, fault-countdown, many-cycles, state-error, unified-release and multi-device
# properties, and the stash's and arena's multi_device.
#   cmake -DOFFLOADKIT=<offloadkit> -P expect_free_memory_split.cmake
cmake_minimum_required(VERSION 3.20)
set(readers release_is_real swap_keeps_both fault_countdown_pause fault_countdown_resume
  fault_countdown_swap many_cycles state_errors multi_device unified_release_behaviour)

# list_of(SELECTION OUT): the "feature/implementation property" lines of `check --list`.
function(list_of selection out)
  execute_process(COMMAND ${OFFLOADKIT} check --executor host --list ${selection}
    RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check --list ${selection}: exit ${rc}\n${text}${err}")
  endif()
  string(REGEX MATCHALL "\n  [a-z]+/[a-z_-]+ [a-z_0-9]+ \\(" lines "${text}")
  set(names)
  foreach(l IN LISTS lines)
    string(REGEX REPLACE "^\n  ([a-z]+/[a-z_-]+ [a-z_0-9]+) \\($" "\\1" l "${l}")
    list(APPEND names "${l}")
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

list_of("" all)
list_of("--free-memory;only" only)
list_of("--free-memory;without" without)
list(LENGTH all n_all)
list(LENGTH only n_only)
list(LENGTH without n_without)
if(n_only EQUAL 0 OR n_without EQUAL 0)
  message(FATAL_ERROR "a side of the split is empty: ${n_only} only, ${n_without} without")
endif()
math(EXPR n_sum "${n_only} + ${n_without}")
if(NOT n_sum EQUAL n_all)
  message(FATAL_ERROR "${n_only} + ${n_without} properties on the two sides, ${n_all} in all")
endif()
foreach(entry IN LISTS all)
  string(REGEX REPLACE "^([a-z]+)/[a-z_-]+ ([a-z_0-9]+)$" "\\1" feature "${entry}")
  string(REGEX REPLACE "^([a-z]+)/[a-z_-]+ ([a-z_0-9]+)$" "\\2" name "${entry}")
  set(reads FALSE)
  if((feature STREQUAL "region" AND name IN_LIST readers) OR
     (feature MATCHES "^(stash|arena)$" AND name STREQUAL "multi_device"))
    set(reads TRUE)
  endif()
  if(reads AND NOT entry IN_LIST only)
    message(FATAL_ERROR "${entry} reads the device's free memory but is not in --free-memory only")
  endif()
  if(NOT reads AND NOT entry IN_LIST without)
    message(FATAL_ERROR "${entry} leaves the free memory alone but is not in --free-memory without")
  endif()
endforeach()
message(STATUS "--free-memory: ${n_only} properties only, ${n_without} without, ${n_all} in all")
