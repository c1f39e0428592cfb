# The pytest plugin (offloadkit.pytest) as a user runs it, in the virtual environment of
# python_module.pip_install, from a folder outside the checkout:
# 1. over examples/python/test_numpy_battery.py on the host executor: exactly the expected numbers
#    of passed, failed and skipped items, the failing items exactly the planted arena's (by name),
#    each failure with its seed, counterexample and reproduce command;
# 2. --offloadkit MODULE:FACTORY with no test file: the same planted arena fails the same items;
# 3. where no GPU is usable, every cuda item is skipped with the reason, none passed;
# 4. `pytest -p offloadkit` with plugin autoloading off loads the plugin by the package's name.
#   cmake -DPYTHON=<venv python> -DWORK=<folder> -DEXAMPLES=<examples/python> -P <this file>
# The items the planted arena (numpy_planted.py: reload() leaves the last tensor out) fails under
# seed 7; its steady_state passes (it never compares bytes) and multi_device is not applicable.
set(planted_failures
  arena/numpy-planted/round_trip[host]
  arena/numpy-planted/event_chain[host]
  arena/numpy-planted/lifetime[host]
  arena/numpy-planted/fault_allocation[host]
  arena/numpy-planted/fault_copy[host]
  arena/numpy-planted/fault_countdown[host]
  arena/numpy-planted/concurrent[host]
  arena/numpy-planted/caller_writes_late[host]
  arena/numpy-planted/model_sequence[host]
  arena/numpy-planted/boundary_shapes[host])
# 11 NumPy arena items (1 more not applicable), 11 planted (10 failing, 1 not applicable), 1 stash,
# and each of the three batteries' shutdown[host] item (every process exits cleanly).
set(counts "10 failed, 16 passed, 2 skipped")
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/tests/expect.cmake)
file(MAKE_DIRECTORY ${WORK}/empty)
set(common -m pytest -p offloadkit.pytest -p no:cacheprovider -rfs --offloadkit-seed 7
    --offloadkit-cases 20)

function(run_pytest out_var rc_var)
  execute_process(COMMAND ${PYTHON} ${common} ${ARGN} WORKING_DIRECTORY ${WORK}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_var} "${out}\n${err}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

function(expect_failures text what)
  # The failing items' property names ("arena/numpy-planted/round_trip[host]"), sorted.
  names_in(failed "${text}" "\nFAILED [^ \n]+")
  list(TRANSFORM failed REPLACE ".*::" "")
  list(SORT failed)
  set(expected ${planted_failures})
  list(SORT expected)
  if(NOT failed STREQUAL expected)
    message(FATAL_ERROR "${what}: the failing items are '${failed}', expected '${expected}':\n${text}")
  endif()
  expect_all("${text}" "${what}" "seed: 7" "reproduce: [^\n]* -m offloadkit check [^\n]*--seed 7"
             "numpy_planted.py:arena")
endfunction()

# 1. the example test file
run_pytest(out rc ${EXAMPLES}/test_numpy_battery.py --offloadkit-executor host)
if(NOT rc EQUAL 1 OR NOT out MATCHES "\n=+ ${counts} in ")
  message(FATAL_ERROR "pytest over test_numpy_battery.py: expected exit status 1 and '${counts}', "
                      "got ${rc}:\n${out}")
endif()
expect_failures("${out}" "pytest over test_numpy_battery.py")
message(STATUS "test_numpy_battery.py: ${counts}")

# 2. --offloadkit on the command line, with --offloadkit-report
file(REMOVE ${WORK}/report.json)
run_pytest(out rc ${WORK}/empty --offloadkit ${EXAMPLES}/numpy_planted.py:arena
           --offloadkit-executor host --offloadkit-report ${WORK}/report.json)
list(LENGTH planted_failures n)
if(NOT rc EQUAL 1 OR NOT out MATCHES "\n=+ ${n} failed, [0-9]+ passed")
  message(FATAL_ERROR "pytest --offloadkit numpy_planted.py:arena: expected exit status 1 and "
                      "${n} failed, got ${rc}:\n${out}")
endif()
expect_failures("${out}" "pytest --offloadkit numpy_planted.py:arena")
# The report holds every item's verdict: as many fails as failed items, with their evidence.
file(READ ${WORK}/report.json report)
string(JSON fails GET "${report}" summary fails)
string(JSON rows LENGTH "${report}" properties)
string(JSON first_reproduce GET "${report}" properties 0 reproduce)
if(NOT fails EQUAL n OR NOT rows EQUAL 12 OR NOT first_reproduce MATCHES "-m offloadkit check ")
  message(FATAL_ERROR "--offloadkit-report: ${fails} fails in ${rows} rows, expected ${n} in 12 "
                      "(first reproduce: ${first_reproduce}):\n${report}")
endif()

# 3. the cuda items, where no GPU is usable
execute_process(COMMAND ${PYTHON} -m offloadkit version OUTPUT_VARIABLE version)
if(version MATCHES "cuda back end: unavailable")
  run_pytest(out rc ${EXAMPLES}/test_numpy_battery.py --offloadkit-executor cuda)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "\n=+ [1-9][0-9]* skipped in "
     OR NOT out MATCHES "SKIPPED [^\n]*the cuda executor cannot run here")
    message(FATAL_ERROR "pytest on the cuda executor without a GPU: expected every item "
                        "skipped with the reason, got ${rc}:\n${out}")
  endif()
  message(STATUS "cuda items: all skipped")
endif()

# 4. -p offloadkit, the entry point not loaded
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
                        ${PYTHON} -m pytest -p offloadkit -p no:cacheprovider -rfs
                        --offloadkit-seed 7 --offloadkit-cases 20 ${WORK}/empty
                        --offloadkit ${EXAMPLES}/numpy_planted.py:arena --offloadkit-executor host
  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(out "${out}\n${err}")
if(NOT rc EQUAL 1 OR NOT out MATCHES "\n=+ ${n} failed, [0-9]+ passed")
  message(FATAL_ERROR "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 pytest -p offloadkit --offloadkit "
                      "numpy_planted.py:arena: expected exit status 1 and ${n} failed, got ${rc}:\n${out}")
endif()
expect_failures("${out}" "pytest -p offloadkit")
message(STATUS "pytest -p offloadkit: the plugin loads by the package's name")
