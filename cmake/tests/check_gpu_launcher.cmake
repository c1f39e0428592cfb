# gpu_tests.launcher: configures launcher_project (no compiler) and runs its tests with ctest,
# first with a resource spec file of two GPUs whose ids are 3 and 5, then without one.
#   cmake -DCTEST=... -DHELPERS=.../offloadkit_helpers.cmake -DPROJECT=... -DWORK=... -P this
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
expect_defined(CTEST HELPERS PROJECT WORK)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${PROJECT} -B ${WORK} -DOFFLOADKIT_HELPERS=${HELPERS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring ${PROJECT} failed (${rc}):\n${out}")
endif()
file(WRITE ${WORK}/resources.json
  [=[{"version": {"major": 1, "minor": 0},
 "local": [{"gpus": [{"id": "3", "slots": 1}, {"id": "5", "slots": 1}]}]}]=])

# run(<out-var> <ctest args...>): ctest's verbose output; fails unless every test passed.
function(run out)
  output_of(text ${CMAKE_COMMAND} -E chdir ${WORK} ${CTEST} -V ${ARGN})
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# expect(<text> <test number> <regex>): the line test <number> printed must match <regex>.
function(expect text number regex)
  string(REGEX MATCH "(^|\n)${number}: visible=[^\n]*" line "${text}")
  string(STRIP "${line}" line)
  if(NOT line MATCHES "^${number}: ${regex}$")
    message(FATAL_ERROR "test ${number} printed '${line}', expected '${number}: ${regex}'\n"
                        "whole output:\n${text}")
  endif()
endfunction()

run(with_spec --resource-spec-file ${WORK}/resources.json)
# Test 1 takes one GPU of the two, test 2 both, each once, in group order.
expect("${with_spec}" 1 "visible=(3|5) order=PCI_BUS_ID args=a b c")
expect("${with_spec}" 2 "visible=(3,5|5,3) order=PCI_BUS_ID args=a b c")
run(without_spec)
# Without a spec file ctest allocates nothing: the command runs with the environment it had.
expect("${without_spec}" 1 "visible=inherited order=unset args=a b c")
expect("${without_spec}" 2 "visible=inherited order=unset args=a b c")
message(STATUS "the launcher shows each test the GPUs ctest allocated to it, and no more")
