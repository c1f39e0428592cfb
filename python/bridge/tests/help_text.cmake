# What the tests that compare help texts share (included by expect_same_options.cmake and
# expect_one_command.cmake):
#   output_of(<var> <command...>): runs the command and stores its stdout; the test fails where it
#     exits non-zero, with the command and what it printed.
#   names_in(<var> <text> <regex>): the names (each match's last word) of the matches of <regex> in
#     <text>; the test fails where there is none.
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)
function(output_of out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  string(REPLACE ";" " " cmd "${ARGN}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "'${cmd}' exited ${rc}:\n${text}\n${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
function(names_in out text regex)
  string(REGEX MATCHALL "${regex}" found "${text}")
  set(names "")
  foreach(f IN LISTS found)
    string(REGEX REPLACE ".*[ \n]" "" f "${f}")
    list(APPEND names "${f}")
  endforeach()
  if(NOT names)
    message(FATAL_ERROR "nothing matches '${regex}' in:\n${text}")
  endif()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()
