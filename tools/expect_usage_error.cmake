# Runs a command that must be refused as a usage error: exit code 2 and a message on stderr that
# matches EXPECT (a regular expression).
#   cmake -DCOMMAND=<program> "-DARGS=<space separated arguments>" -DEXPECT=<regex> -P <this file>
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${COMMAND} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit code 2 from '${COMMAND} ${ARGS}', got '${rc}'\n"
                      "stdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "the message of '${COMMAND} ${ARGS}' does not match '${EXPECT}':\n${err}")
endif()
message(STATUS "refused as expected: ${err}")
