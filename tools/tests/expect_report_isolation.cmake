# The --report of runs whose properties misbehave (check_isolation_fixture):
#   cmake -DFIXTURE=<path of check_isolation_fixture> -DOUT=<path without extension>
#         -P expect_report_isolation.cmake
# 1. A whole run: each row that ended abnormally says how its process ended, with the last lines
#    of its output and, for a crash or a time-out, the debugger's command line.
# 2. A run interrupted by SIGINT (coreutils' timeout sends it) while a property hangs: the report
#    is written with the properties that finished and says the run stopped, and the exit status
#    is 130, as without --report.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/tests/expect.cmake)

function(fail what)
  message(FATAL_ERROR "${what}\n--- stdout:\n${out}\n--- stderr:\n${err}")
endfunction()

# Checks row `index`: its property, verdict and process end (a regular expression; "null" for a
# failure whose process ended normally, which JSON holds as null and CMake reads as "").
function(expect_row index property verdict process_end)
  json_get(got_property properties ${index} property)
  json_get(got_verdict properties ${index} verdict)
  if(NOT got_property STREQUAL "${property}" OR NOT got_verdict STREQUAL "${verdict}")
    fail("row ${index}: ${got_property} ${got_verdict}, expected ${property} ${verdict}")
  endif()
  if(NOT "${process_end}" STREQUAL "")
    json_get(got_end properties ${index} process_end)
    set(end_regex "^${process_end}$")
    if("${process_end}" STREQUAL "null")
      set(end_regex "^$")
    endif()
    if(NOT got_end MATCHES "${end_regex}")
      fail("row ${index} (${property}): process_end '${got_end}', expected '${process_end}'")
    endif()
  endif()
endfunction()

# 1. The whole run.
file(REMOVE "${OUT}.json")
execute_process(COMMAND ${FIXTURE} check --executor host --seed 42 --timeout 2
                        --shutdown-grace 1 --report ${OUT}.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
if(NOT rc EQUAL 1)
  fail("expected exit status 1, got '${rc}'")
endif()
file(READ "${OUT}.json" json)
expect_row(0 passes_first holds "")
expect_row(1 fails fails "null")
expect_row(2 segfaults fails "crashed: signal 11 \\(SIGSEGV\\)")
expect_row(3 aborts fails "crashed: signal 6 \\(SIGABRT\\)")
expect_row(4 exits fails "exited with code 1 without a result")
expect_row(5 hangs fails "timed out after 2 s")
expect_row(7 crashes_on_exit holds "")
expect_row(8 passes_last holds "")
expect_row(9 hangs_on_exit holds "")
json_get(crash_end properties 7 shutdown)
json_get(hang_end properties 9 shutdown)
json_get(findings shutdown findings)
string(JSON n_findings LENGTH "${findings}")
json_get(clean shutdown clean)
json_get(first_feature shutdown findings 0 feature)
json_get(first_end shutdown findings 0 end)
json_get(first_properties shutdown findings 0 properties)
json_get(first_of shutdown findings 0 of)
json_get(first_reproduce shutdown findings 0 reproduce)
json_get(n_summary summary shutdown_findings)
if(NOT crash_end STREQUAL "crashed: signal 11 (SIGSEGV) after its result" OR
   NOT hang_end STREQUAL "still running 1 s after its result (killed)" OR
   NOT n_findings EQUAL 2 OR NOT clean STREQUAL "OFF" OR NOT first_feature STREQUAL "fixture" OR
   NOT first_end STREQUAL crash_end OR NOT first_properties MATCHES "^\\[ *\"crashes_on_exit\" *\\]$" OR
   NOT first_of EQUAL 5 OR NOT first_reproduce MATCHES "--property crashes_on_exit" OR
   NOT n_summary EQUAL 2)
  fail("the shutdown findings: rows '${crash_end}' '${hang_end}', ${n_findings} findings "
       "(clean ${clean}): ${findings}")
endif()
# Markdown and HTML say the same, in a section of their own.
file(REMOVE "${OUT}.md")
execute_process(COMMAND ${FIXTURE} check --executor host --seed 42 --property crashes_on_exit
                        --report ${OUT}.md
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
file(READ "${OUT}.md" md)
if(NOT rc EQUAL 1 OR NOT md MATCHES "\\| crashes_on_exit \\| holds \\|" OR
   NOT md MATCHES "\n## Shutdown\n\n### fixture: 1 of 1 properties' processes crashed: signal 11 \\(SIGSEGV\\) after its result\n.*- properties: crashes_on_exit\n- reproduce: `check_isolation_fixture check")
  fail("the Markdown report's shutdown section (exit ${rc}):\n${md}")
endif()
json_get(output properties 2 output)
json_get(debug properties 2 debug)
json_get(reported properties 2 reported_result)
if(NOT output MATCHES "fixture: about to store to an unmapped address" OR
   NOT debug MATCHES "^gdb --args check_isolation_fixture check .* --property segfaults .*--in-process$" OR
   NOT reported STREQUAL "OFF")
  fail("the segfault's row lacks its evidence: output '${output}', debug '${debug}', "
       "reported_result '${reported}'")
endif()
json_get(complete summary complete)
if(NOT complete STREQUAL "ON")
  fail("a run that finished is reported as stopped early")
endif()

# 2. Interrupted while `hangs` runs (its limit is a minute): the five properties before it are in
#    the report.
file(REMOVE "${OUT}_interrupted.json")
execute_process(COMMAND timeout --preserve-status -s INT 8 ${FIXTURE} check --executor host
                        --seed 42 --timeout 60 --report ${OUT}_interrupted.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
if(NOT rc EQUAL 130)
  fail("expected exit status 130 from the interrupted run, got '${rc}'")
endif()
if(NOT EXISTS "${OUT}_interrupted.json")
  fail("the interrupted run wrote no report")
endif()
file(READ "${OUT}_interrupted.json" json)
json_get(rows properties)
string(JSON n LENGTH "${rows}")
json_get(selected summary selected)
json_get(complete summary complete)
json_get(stopped summary stopped)
if(NOT n EQUAL 5 OR NOT selected EQUAL 10 OR NOT complete STREQUAL "OFF" OR
   NOT stopped STREQUAL "interrupted by SIGINT after 5 of 10 properties")
  fail("the interrupted run's report: ${n} of ${selected} rows, complete ${complete}, "
       "stopped '${stopped}'")
endif()
expect_row(4 exits fails "exited with code 1 without a result")
message(STATUS "the reports of the misbehaving run and of the interrupted run are as expected")
