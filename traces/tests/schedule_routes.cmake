# traces_capture.schedule_routes: the two routes of a production capture must give the same
# schedule. Runs TARGET (which writes its recorder's file) under `offloadkit capture`, turns the
# capture's NVTX marks into a file with `offloadkit schedule-from-trace`, compares the two files
# byte for byte, checks that `analyze` found the NVTX steps and replays the file on the host.
# Exit 77 (skipped) where capture cannot record here (exit 3: no CUPTI).
foreach(v OFFLOADKIT TARGET WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "schedule_routes.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${name}: exit ${rc}\n${out}${err}")
  set(rc ${rc} PARENT_SCOPE)
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(capture ${OFFLOADKIT} capture -o ${WORK}/capture.json -- ${TARGET} ${WORK}/recorder.json)
if(rc EQUAL 3)
  message("SKIPPED: offloadkit capture cannot record here (see above)")
  cmake_language(EXIT 77)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "capture failed")
endif()
if(NOT out MATCHES "steps: 2\n")
  message(FATAL_ERROR "the capture's report does not divide the run into its two NVTX steps")
endif()

run(schedule-from-trace ${OFFLOADKIT} schedule-from-trace ${WORK}/capture.json
    --recording 1 -o ${WORK}/trace.json)
if(NOT rc EQUAL 0 OR NOT out MATCHES "recording 1 of 2, 72 steps, 36 keys")
  message(FATAL_ERROR "schedule-from-trace did not find the run's two recordings")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/recorder.json ${WORK}/trace.json
                RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  file(READ ${WORK}/recorder.json a)
  file(READ ${WORK}/trace.json b)
  message(FATAL_ERROR "the two routes differ:\nrecorder: ${a}\ntrace:    ${b}")
endif()

run(replay ${OFFLOADKIT} replay ${WORK}/trace.json --executor host --impl optimized --quiet)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the converted schedule does not replay")
endif()
message("both routes give the same schedule, and it replays")
