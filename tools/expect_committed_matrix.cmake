# Checks that the committed CONFORMANCE.md (after its preface) is exactly what
# `offloadkit conformance conformance/conformance.json` writes over the committed reports and
# classifications: nothing in it edited by hand, nothing stale, every failure classified.
#   cmake -DCOMMAND=<offloadkit> -DROOT=<source folder> -P <this file>
execute_process(COMMAND ${COMMAND} conformance conformance/conformance.json
  WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "offloadkit conformance conformance/conformance.json ended with ${rc}, "
                      "not 0 (every failure classified, no classification stale):\n${err}")
endif()
file(READ "${ROOT}/CONFORMANCE.md" committed)
string(FIND "${out}" "\n" eol)
string(SUBSTRING "${out}" 0 ${eol} title)
string(FIND "${committed}" "${title}\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "CONFORMANCE.md has no line '${title}': regenerate it with "
                      "offloadkit conformance conformance/conformance.json")
endif()
string(SUBSTRING "${committed}" ${at} -1 matrix)
if(NOT matrix STREQUAL out)
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/CONFORMANCE.expected.md" "${out}")
  message(FATAL_ERROR "CONFORMANCE.md after its preface differs from offloadkit conformance's "
                      "output over conformance/ (written to "
                      "${CMAKE_CURRENT_BINARY_DIR}/CONFORMANCE.expected.md): regenerate it")
endif()
