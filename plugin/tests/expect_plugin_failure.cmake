# Runs `offloadkit check` on a planted-bug plugin and checks that it is caught as a user would see
# it: exit code 1, a FAILED row with a seed, every regex of EXPECT (';'-separated) in the output,
# every regex of IN_MESSAGE inside the first FAILED row's own message (the indented lines between
# "FAILED (" and the row's captured output or reproduce line, so that the same text printed
# elsewhere, by a teardown say, does not count), no regex of ABSENT anywhere in the output, and a
# printed reproduce line that, run as printed, fails again.
#   cmake -DOFFLOADKIT=<program> "-DARGS=<check arguments>" "-DEXPECT=<regexes>"
#         ["-DIN_MESSAGE=<regexes>"] ["-DABSENT=<regexes>"] -P <this file>
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${OFFLOADKIT} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}\n${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit code 1 from 'offloadkit ${ARGS}', got '${rc}'\n${all}")
endif()
foreach(want IN LISTS EXPECT)
  if(NOT all MATCHES "${want}")
    message(FATAL_ERROR "'${want}' not found in the output of 'offloadkit ${ARGS}':\n${all}")
  endif()
endforeach()
if(DEFINED IN_MESSAGE)
  string(FIND "${out}" "FAILED (" start)
  if(start EQUAL -1)
    message(FATAL_ERROR "no FAILED row in the output of 'offloadkit ${ARGS}':\n${all}")
  endif()
  string(SUBSTRING "${out}" ${start} -1 row)
  # The message ends where the row's captured output or its reproduce line begins.
  foreach(marker "\n      last lines of its output:" "\n      reproduce:")
    string(FIND "${row}" "${marker}" end)
    if(NOT end EQUAL -1)
      string(SUBSTRING "${row}" 0 ${end} row)
    endif()
  endforeach()
  foreach(want IN LISTS IN_MESSAGE)
    if(NOT row MATCHES "${want}")
      message(FATAL_ERROR "'${want}' not found in the FAILED row's message of 'offloadkit ${ARGS}'"
                          " (only elsewhere, or not at all):\n${row}\n--- whole output ---\n${all}")
    endif()
  endforeach()
endif()
foreach(unwanted IN LISTS ABSENT)
  if(all MATCHES "${unwanted}")
    message(FATAL_ERROR "'${unwanted}' found in the output of 'offloadkit ${ARGS}':\n${all}")
  endif()
endforeach()
# The program is the offloadkit command, or an interpreter that ran the check (`python -m
# offloadkit`, as `check --python` does).
if(NOT all MATCHES "reproduce: ([^\n]*offloadkit) (check [^\n]*--seed [0-9]+[^\n]*)")
  message(FATAL_ERROR "no reproduce line with a seed in the output of 'offloadkit ${ARGS}':\n${all}")
endif()
set(program "${CMAKE_MATCH_1}")
set(replay "${CMAKE_MATCH_2}")
if(program STREQUAL "offloadkit")
  set(program_words ${OFFLOADKIT})
else()
  separate_arguments(program_words UNIX_COMMAND "${program}")
endif()
separate_arguments(replay_args UNIX_COMMAND "${replay}")
execute_process(COMMAND ${program_words} ${replay_args}
  RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc2 EQUAL 1)
  message(FATAL_ERROR "the reproduce line '${program} ${replay}' exited with '${rc2}', not 1:\n"
                      "${out2}\n${err2}")
endif()
message(STATUS "caught, and the reproduce line fails again: ${program} ${replay}")
