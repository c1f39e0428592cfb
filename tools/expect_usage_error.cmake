# Runs a command that must be refused: exit code EXPECT_RC (default 2, bad usage), a message on
# stderr that matches EXPECT (a regular expression), and no error on stdout (nothing at all for a
# usage error, which is found before anything runs).
#   cmake -DCOMMAND=<program> "-DARGS=<space separated arguments>" -DEXPECT=<regex>
#         [-DEXPECT_RC=<code>] -P <this file>
if(NOT DEFINED EXPECT_RC OR EXPECT_RC STREQUAL "")
  set(EXPECT_RC 2)
endif()
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${COMMAND} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC} from '${COMMAND} ${ARGS}', got '${rc}'\n"
                      "stdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "the message of '${COMMAND} ${ARGS}' does not match '${EXPECT}':\n${err}")
endif()
if(out MATCHES "${EXPECT}" OR (EXPECT_RC EQUAL 2 AND NOT out STREQUAL ""))
  message(FATAL_ERROR "'${COMMAND} ${ARGS}' wrote to stdout:\n${out}")
endif()
message(STATUS "refused as expected: ${err}")
