# What the test scripts run with `cmake -P` share; include() it. Where the including script
# defines a function `fail(<message>)` (to add its command and output), failures go through it.
#   expect_defined(<variable>...): the script was given each variable (-D<variable>=...).
#   expect_all(<text> <what> <regex>...): every regex matches <text> (the output of <what>).
#   expect_none(<text> <what> <regex>...): no regex matches <text>.
#   expect_fails_again(<shown> <command>...): a printed reproduce line (<shown>, as printed), run
#     as printed, exits 1: the failure it reproduces happens again.
#   output_of(<var> <command>...): the command's stdout; the command must exit 0.
#   names_in(<var> <text> <regex>): the names (each match's last word) of the matches of <regex>
#     in <text>; there must be one at least.
#   json_get(<var> <path>...): the member at <path> of the JSON text in the variable `json` (a
#     macro: the caller's); a missing member is a failure.
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)

function(expect_failure message)
  if(COMMAND fail)
    fail("${message}")
  endif()
  message(FATAL_ERROR "${message}")
endfunction()

function(expect_defined)
  get_filename_component(script "${CMAKE_SCRIPT_MODE_FILE}" NAME)
  foreach(variable IN LISTS ARGN)
    if(NOT DEFINED ${variable})
      expect_failure("${script}: -D${variable}=... is missing")
    endif()
  endforeach()
endfunction()

function(expect_all text what)
  foreach(want IN LISTS ARGN)
    if(NOT text MATCHES "${want}")
      expect_failure("'${want}' not found in the output of ${what}:\n${text}")
    endif()
  endforeach()
endfunction()

function(expect_none text what)
  foreach(unwanted IN LISTS ARGN)
    if(text MATCHES "${unwanted}")
      expect_failure("'${unwanted}' found in the output of ${what}:\n${text}")
    endif()
  endforeach()
endfunction()

function(expect_fails_again shown)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1)
    expect_failure("the reproduce line '${shown}' exited with '${rc}', not 1:\n${out}\n${err}")
  endif()
  message(STATUS "the reproduce line fails again: ${shown}")
endfunction()

function(output_of out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  string(REPLACE ";" " " cmd "${ARGN}")
  if(NOT rc EQUAL 0)
    expect_failure("'${cmd}' exited ${rc}:\n${text}\n${err}")
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
    expect_failure("nothing matches '${regex}' in:\n${text}")
  endif()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

macro(json_get var)
  string(JSON ${var} ERROR_VARIABLE json_get_error GET "${json}" ${ARGN})
  if(json_get_error)
    expect_failure("the JSON has no ${ARGN}: ${json_get_error}\n${json}")
  endif()
endmacro()
