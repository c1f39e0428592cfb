# Runs a command and checks its exit status and output.
#   cmake -DCOMMAND=<program> "-DARGS=<space separated arguments>" -DEXPECT_RC=<status>
#         [-DEXPECT_OUT=<regex on stdout>] [-DEXPECT_ERR=<regex on stderr>]
#         [-DREJECT_ERR=<regex stderr must not match>] [-DEMPTY_OUT=1] -P <this file>
# Every run also checks that stderr carries no source location ("file.cpp:123").
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${COMMAND} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(context "'${COMMAND} ${ARGS}'\nstdout:\n${out}\nstderr:\n${err}")
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit status ${EXPECT_RC} from ${context}\ngot '${rc}'")
endif()
if(DEFINED EXPECT_OUT AND NOT out MATCHES "${EXPECT_OUT}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_OUT}': ${context}")
endif()
if(DEFINED EXPECT_ERR AND NOT err MATCHES "${EXPECT_ERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_ERR}': ${context}")
endif()
if(DEFINED REJECT_ERR AND err MATCHES "${REJECT_ERR}")
  message(FATAL_ERROR "stderr matches '${REJECT_ERR}', which it must not: ${context}")
endif()
if(err MATCHES "\\.(cpp|hpp|cu):[0-9]+")
  message(FATAL_ERROR "stderr carries a source location: ${context}")
endif()
if(EMPTY_OUT AND NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout: ${context}")
endif()
message(STATUS "as expected: ${context}")
