# Runs `python -m offloadkit check` (the installed package, from a folder outside the checkout) and
# checks what a user sees: the exit status EXPECT_RC; every regex of EXPECT (';'-separated) in the
# output; with FAILED set, exactly those properties (feature/implementation property, ','-separated,
# so that add_test passes them as one argument) have FAILED rows, no more and no fewer; with
# EXPECT_RC 1, a printed reproduce line that names this interpreter and `-m offloadkit check`,
# which, run as printed, fails again.
#   cmake -DPYTHON=<venv python> -DWORK=<folder> "-DARGS=<check arguments>" -DEXPECT_RC=<n>
#         ["-DEXPECT=<regexes>"] ["-DFAILED=<rows>"] -P <this file>
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/tests/expect.cmake)
file(MAKE_DIRECTORY ${WORK})
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${PYTHON} -m offloadkit check ${args} WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}\n${err}")
set(what "'python -m offloadkit check ${ARGS}'")
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit status ${EXPECT_RC} from ${what}, got '${rc}'\n${all}")
endif()
expect_all("${all}" "${what}" ${EXPECT})
if(DEFINED FAILED)
  # "[ 3/12] arena/numpy-pinned-arena round_trip ... FAILED (...)"
  string(REGEX MATCHALL "\\] [^ \n]+ [^ \n]+ \\.\\.\\. FAILED" rows "${out}")
  # Without its bracket, so that each row is one list element.
  string(REPLACE "] " "" rows "${rows}")
  set(failed "")
  foreach(row IN LISTS rows)
    string(REGEX REPLACE "^([^ ]+ [^ ]+) .*" "\\1" name "${row}")
    list(APPEND failed "${name}")
  endforeach()
  list(SORT failed)
  string(REPLACE "," ";" expected "${FAILED}")
  list(SORT expected)
  if(NOT failed STREQUAL expected)
    message(FATAL_ERROR "${what}: the FAILED rows are '${failed}', expected '${expected}':\n${all}")
  endif()
endif()
if(EXPECT_RC EQUAL 1)
  string(REGEX REPLACE "([][+.*()^$?|\\\\])" "\\\\\\1" py_rx "${PYTHON}")
  if(NOT out MATCHES "reproduce: ${py_rx} -m offloadkit (check [^\n]*--seed [0-9]+[^\n]*)")
    message(FATAL_ERROR "no reproduce line '${PYTHON} -m offloadkit check ... --seed N' in the "
                        "output of ${what}:\n${all}")
  endif()
  set(replay "${CMAKE_MATCH_1}")
  separate_arguments(replay_args UNIX_COMMAND "${replay}")
  expect_fails_again("${PYTHON} -m offloadkit ${replay}" ${CMAKE_COMMAND} -E chdir ${WORK}
                     ${PYTHON} -m offloadkit ${replay_args})
endif()
message(STATUS "${out}")
