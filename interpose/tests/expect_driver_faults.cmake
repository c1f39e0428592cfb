# Runs `offloadkit check --driver-faults` as a user would and checks how it ends: exit code
# EXPECT_RC and the regex EXPECT in the output. With EXPECT_RC 1, the first
# printed reproduce line must fail again when run as printed. Exit code 3 (no usable GPU) passes
# with the command's own message, which the test's SKIP_REGULAR_EXPRESSION reports as skipped.
#   cmake -DOFFLOADKIT=<program> "-DARGS=<arguments>" -DEXPECT_RC=<code> "-DEXPECT=<regexes>"
#         -P <this file>
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${OFFLOADKIT} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}\n${err}")
message("${all}")
if(rc EQUAL 3)
  return()
endif()
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC} from 'offloadkit ${ARGS}', got '${rc}'")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "'${EXPECT}' not found in the output of 'offloadkit ${ARGS}'")
endif()
if(EXPECT_RC EQUAL 1)
  if(NOT all MATCHES "reproduce: offloadkit (check [^\n]*--driver-faults[^\n]*--fault-call [0-9]+)")
    message(FATAL_ERROR "no reproduce line with --fault-call in the output of 'offloadkit ${ARGS}'")
  endif()
  set(replay "${CMAKE_MATCH_1}")
  separate_arguments(replay_args UNIX_COMMAND "${replay}")
  execute_process(COMMAND ${OFFLOADKIT} ${replay_args}
    RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
  if(NOT rc2 EQUAL 1)
    message(FATAL_ERROR "the reproduce line 'offloadkit ${replay}' exited with '${rc2}', not 1:\n"
                        "${out2}\n${err2}")
  endif()
  message(STATUS "the reproduce line fails again: offloadkit ${replay}")
endif()
