# The schedule a Python job records with offloadkit.ScheduleRecorder is one `offloadkit replay`
# accepts: examples/python/record_schedule.py writes one, `offloadkit replay` runs it through
# offloadkit's reference stash and `python -m offloadkit replay --python` through the NumPy stash,
# comparing every restored byte.
#   cmake -DPYTHON=<interpreter with offloadkit installed> -DOFFLOADKIT=<offloadkit>
#         -DSOURCE=<repo> -DWORK=<scratch folder> -P <this file>
set(file ${WORK}/recorded_step.json)
file(REMOVE ${file})
execute_process(
  COMMAND ${PYTHON} ${SOURCE}/examples/python/record_schedule.py ${file} --seed 7
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS ${file})
  message(FATAL_ERROR "record_schedule.py failed (${rc}):\n${out}\n${err}")
endif()

execute_process(COMMAND ${OFFLOADKIT} replay ${file}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "0 mismatching bytes")
  message(FATAL_ERROR "offloadkit replay ${file} exited ${rc}:\n${out}\n${err}")
endif()
message(STATUS "replayed through offloadkit's reference stash:\n${out}")

execute_process(
  COMMAND ${PYTHON} -m offloadkit replay ${file} --data-row-bytes 64
          --python ${SOURCE}/examples/python/numpy_offload.py:make_stash
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "plugin numpy-paged.* 0 mismatching bytes")
  message(FATAL_ERROR "offloadkit replay ${file} through the NumPy stash exited ${rc}:\n"
                      "${out}\n${err}")
endif()
message(STATUS "replayed through the NumPy stash (python -m offloadkit replay):\n${out}")
