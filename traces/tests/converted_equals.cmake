# Runs `offloadkit schedule-from-trace TIMELINE --recording K -o OUT` and requires OUT to equal
# EXPECTED byte for byte (a shipped capture must still convert into the schedule shipped beside it).
foreach(v OFFLOADKIT TIMELINE RECORDING OUT EXPECTED)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "converted_equals.cmake: -D${v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${OFFLOADKIT} schedule-from-trace ${TIMELINE} --recording ${RECORDING}
                        -o ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "schedule-from-trace exited ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${EXPECTED} RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "${OUT} differs from ${EXPECTED}")
endif()
