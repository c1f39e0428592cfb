# Runs a command that must be refused: exit code EXPECT_RC (default 2, bad usage), a message on
# stderr that matches EXPECT (a regular expression), and no error on stdout (nothing at all for a
# usage error, which is found before anything runs).
#   cmake -DCOMMAND=<program> "-DARGS=<space separated arguments>" -DEXPECT=<regex>
#         [-DEXPECT_RC=<code>] -P <this file>
if(NOT DEFINED EXPECT_RC OR EXPECT_RC STREQUAL "")
  set(EXPECT_RC 2)
endif()
set(EXPECT_ERR "${EXPECT}")
set(REJECT_OUT "${EXPECT}")
unset(EXPECT)
if(EXPECT_RC EQUAL 2)
  set(EMPTY_OUT 1)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/expect_exit.cmake)
