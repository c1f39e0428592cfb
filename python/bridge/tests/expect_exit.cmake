# Runs a command that must end with exit code EXIT and print something matching EXPECT (a regular
# expression) on stdout or stderr.
#   cmake -DCOMMAND=<program> "-DARGS=<arguments>" -DEXIT=<code> -DEXPECT=<regex> -P <this file>
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${COMMAND} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXIT)
  message(FATAL_ERROR "expected exit code ${EXIT} from '${COMMAND} ${ARGS}', got '${rc}'\n"
                      "stdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT "${out}\n${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output of '${COMMAND} ${ARGS}' does not match '${EXPECT}':\n"
                      "stdout:\n${out}\nstderr:\n${err}")
endif()
message(STATUS "exit ${rc} as expected:\n${err}")
