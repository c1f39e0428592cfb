# Runs `offloadkit check` on a planted-bug plugin and checks that it is caught as a user would see
# it: exit code 1, a FAILED row with a seed, every regex of EXPECT (';'-separated) in the output,
# every regex of IN_MESSAGE inside the first FAILED row's own message (the indented lines between
# "FAILED (" and the row's captured output or reproduce line, so that the same text printed
# elsewhere, by a teardown say, does not count), no regex of ABSENT anywhere in the output, and a
# printed reproduce line that, run as printed, fails again.
#   cmake -DOFFLOADKIT=<program> "-DARGS=<check arguments>" "-DEXPECT=<regexes>"
#         ["-DIN_MESSAGE=<regexes>"] ["-DABSENT=<regexes>"] -P <this file>
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/tests/expect.cmake)
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${OFFLOADKIT} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}\n${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit code 1 from 'offloadkit ${ARGS}', got '${rc}'\n${all}")
endif()
expect_all("${all}" "'offloadkit ${ARGS}'" ${EXPECT})
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
expect_none("${all}" "'offloadkit ${ARGS}'" ${ABSENT})
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
expect_fails_again("${program} ${replay}" ${program_words} ${replay_args})
