# The --report of runs whose properties misbehave (check_isolation_fixture):
#   cmake -DFIXTURE=<path of check_isolation_fixture> -DOUT=<path without extension>
#         -P expect_report_isolation.cmake
# 1. A whole run: each row that ended abnormally says how its process ended, with the last lines
#    of its output and, for a crash or a time-out, the debugger's command line.
# 2. A run interrupted by SIGINT (coreutils' timeout sends it) while a property hangs: the report
#    is written with the properties that finished and says the run stopped, and the exit status
#    is 130, as without --report.
cmake_minimum_required(VERSION 3.25)

function(fail what)
  message(FATAL_ERROR "${what}\n--- stdout:\n${out}\n--- stderr:\n${err}")
endfunction()

# Reads `path...` of `json` into `var`; a missing member is a failure.
macro(json_get var)
  string(JSON ${var} ERROR_VARIABLE json_error GET "${json}" ${ARGN})
  if(json_error)
    fail("the report has no ${ARGN}: ${json_error}\n${json}")
  endif()
endmacro()

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
                        --report ${OUT}.json
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
expect_row(7 crashes_on_exit fails "crashed: signal 11 \\(SIGSEGV\\) after its result")
expect_row(8 passes_last holds "")
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
if(NOT n EQUAL 5 OR NOT selected EQUAL 9 OR NOT complete STREQUAL "OFF" OR
   NOT stopped STREQUAL "interrupted by SIGINT after 5 of 9 properties")
  fail("the interrupted run's report: ${n} of ${selected} rows, complete ${complete}, "
       "stopped '${stopped}'")
endif()
expect_row(4 exits fails "exited with code 1 without a result")
message(STATUS "the reports of the misbehaving run and of the interrupted run are as expected")
