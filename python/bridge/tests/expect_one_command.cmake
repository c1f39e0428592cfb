# One `offloadkit`: the package's console script and the C++ program print the same command list,
# and every command the package runs in Python is in it.
#   cmake -DOFFLOADKIT=<offloadkit program> -DSCRIPT=<the venv's offloadkit console script>
#         -DPYTHON=<the venv's python> -P <this file>
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/tests/expect.cmake)
# The command list's lines: two spaces, then the command's name.
function(commands_of out text)
  string(REGEX MATCH "commands:\n(  [a-z][^\n]*\n)+" block "${text}")
  names_in(names "${block}" "\n  [a-z][a-z-]*")
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

output_of(program ${OFFLOADKIT} help)
output_of(script ${SCRIPT} --help)
output_of(module ${PYTHON} -m offloadkit --help)
if(NOT script STREQUAL program OR NOT module STREQUAL program)
  message(FATAL_ERROR "`offloadkit --help` differs between the program and the package:\n"
                      "program:\n${program}\nconsole script:\n${script}\npython -m:\n${module}")
endif()
commands_of(listed "${program}")
# What the package runs where it finds no program: each of those must be one of the program's.
set(ENV{OFFLOADKIT_PROGRAM} none)
output_of(own ${SCRIPT} --help)
unset(ENV{OFFLOADKIT_PROGRAM})
commands_of(python_commands "${own}")
foreach(c IN LISTS python_commands)
  if(NOT c IN_LIST listed)
    message(FATAL_ERROR "the package runs `${c}`, which the program's command table does not "
                        "list (${listed})")
  endif()
endforeach()
# A command of the program's, through the console script, reaches the program.
output_of(capture ${SCRIPT} capture --help)
if(NOT capture MATCHES "usage: offloadkit capture")
  message(FATAL_ERROR "`offloadkit capture --help` through the console script:\n${capture}")
endif()
message(STATUS "one command list: ${listed}; run in Python: ${python_commands}")
