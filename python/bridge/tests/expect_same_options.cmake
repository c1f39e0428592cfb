# Every option that `offloadkit check --help` lists is one `python -m offloadkit check --help` lists
# too (--plugin aside: --python excludes it), so that `offloadkit check --python` passes each on.
#   cmake -DOFFLOADKIT=<offloadkit> -DPYTHON=<interpreter with offloadkit> -P <this file>
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/tests/expect.cmake)
set(option_lines "\n  +(-h, )?--[a-z][a-z-]*")
output_of(text ${OFFLOADKIT} check --help)
names_in(command "${text}" "${option_lines}")
# The Python command's own options (it hands --help to the program where it finds one).
set(ENV{OFFLOADKIT_PROGRAM} none)
output_of(text ${PYTHON} -m offloadkit check --help)
names_in(python "${text}" "${option_lines}")
list(REMOVE_ITEM command --plugin)
set(missing "")
foreach(o IN LISTS command)
  if(NOT o IN_LIST python)
    list(APPEND missing "${o}")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "options of `offloadkit check` that `python -m offloadkit check` does not "
                      "take: ${missing} (it takes: ${python})")
endif()
message(STATUS "python -m offloadkit check takes every option of offloadkit check: ${command}")
