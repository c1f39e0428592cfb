# `offloadkit check --python` passes the Python command's results through unchanged: runs
# `<offloadkit> check ARGS` (with OFFLOADKIT_PYTHON=PYTHON) and `PYTHON -m offloadkit check ARGS`
# and checks that both exit 1 and print the same seed, the same result rows (times aside), the same
# summary and the same reproduce lines, at least one of them.
#   cmake -DOFFLOADKIT=<offloadkit> -DPYTHON=<interpreter with offloadkit> "-DARGS=<check options>"
#         -P <this file>
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env OFFLOADKIT_PYTHON=${PYTHON} ${OFFLOADKIT} check
                        ${args}
  RESULT_VARIABLE rc_command OUTPUT_VARIABLE out_command ERROR_VARIABLE err_command)
execute_process(COMMAND ${PYTHON} -m offloadkit check ${args}
  RESULT_VARIABLE rc_python OUTPUT_VARIABLE out_python ERROR_VARIABLE err_python)
set(both "--- offloadkit check ${ARGS} (${rc_command}):\n${out_command}\n${err_command}\n"
         "--- ${PYTHON} -m offloadkit check ${ARGS} (${rc_python}):\n${out_python}\n${err_python}")
if(NOT rc_command EQUAL 1 OR NOT rc_python EQUAL 1)
  message(FATAL_ERROR "expected exit status 1 from both:\n${both}")
endif()

# The lines that must agree: seed, result rows without their times, summary, reproduce lines.
function(essence text out)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(kept "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^seed|^\\[ *[0-9]+/[0-9]+\\]|[0-9]+ passed, [0-9]+ failed|reproduce: ")
      string(REGEX REPLACE "[0-9]+(\\.[0-9]+)? m?s([),]|$)" "<time>\\2" line "${line}")
      list(APPEND kept "${line}")
    endif()
  endforeach()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()
essence("${out_command}" command)
essence("${out_python}" python)
if(NOT command STREQUAL python)
  string(REPLACE ";" "\n" command "${command}")
  string(REPLACE ";" "\n" python "${python}")
  message(FATAL_ERROR "the results differ:\n--- through the command:\n${command}\n"
                      "--- from python -m offloadkit directly:\n${python}\n\n${both}")
endif()
if(NOT out_command MATCHES "reproduce: ${PYTHON} -m offloadkit check [^\n]*--seed [0-9]+")
  message(FATAL_ERROR "no reproduce line naming ${PYTHON} and a seed:\n${both}")
endif()
string(REPLACE ";" "\n" command "${command}")
message(STATUS "the same exit status and results both ways:\n${command}")
