# Tests of offloadkit.adapters against the library stand-ins of python/tests/adapters/standins
# (labels cpu, python, adapters), included by python/bridge/tests/CMakeLists.txt inside its
# python_module block (venv, venv_python, module_work, python_check_timeout, module_tests):
# - python_adapters.unit: each adapter's mapping, declared profile and error translation;
# - python_module.adapter_<name>: `python -m offloadkit check` of each region adapter and of the
#   paged stash adapter over its stand-in on the host executor, with exactly the FAILED rows the profile explains, and its
#   planted stand-in defect caught with a seed whose reproduce line fails again;
# - python_module.adapter_pytest: the same batteries through the pytest plugin.
# The activation adapters (torchtune, trl, megatron) have no battery entry: their hooks run on
# PyTorch tensors (offloadkit.hooks), which the stand-ins do not provide; python_adapters.unit
# checks them, and fails the round trip under Megatron's planted reload_drops_last_byte.
# Megatron's paged stash adapter runs the stash battery over its stand-in (paged_stash.py, whose
# kernels run on the host; the stand-in torch computes with NumPy, which the venv's interpreter
# needs), and python_adapters.unit checks its mapping and profile (test_megatron_paged_stash.py,
# skipped without NumPy); both catch the planted stashes_after_overflow.
set(adapters_dir ${CMAKE_CURRENT_LIST_DIR})
set(standins ${adapters_dir}/standin_factories.py)

add_test(NAME python_adapters.unit
  COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PROJECT_SOURCE_DIR}/python
          ${Python3_EXECUTABLE} -m unittest discover -v -s ${adapters_dir} -p "test_*.py")
set_tests_properties(python_adapters.unit PROPERTIES LABELS "cpu;python;adapters" TIMEOUT 120)

# name|arguments|expected exit status|regexes (','-separated)|planted defect. The counts line
# pins how many rows fail, the "<property> ... FAILED" regexes which ones (the FAILED option of
# expect_python_check.cmake reads only the first row of several: its list of matches does not
# split on the "]" each one starts with).
set(mps "stash/megatron-paged-stash")
set(tms "region/torch_memory_saver")
set(vllm "region/vllm-cumem")
set(all_fail model_based release_is_real graph_replay_after_resume swap_keeps_both state_errors
  multi_device cross_stream_order caller_writes_late adjacent_allocations)
set(tms_planted "1 passed, 9 failed, 4 not applicable")
set(vllm_planted "1 passed, 9 failed, 4 not applicable")
foreach(p IN LISTS all_fail)
  string(APPEND tms_planted ",${tms} ${p} [.][.][.] FAILED")
  string(APPEND vllm_planted ",${vllm} ${p} [.][.][.] FAILED")
endforeach()
set(adapter_checks
  # The library's defaults: a pinned backup allocated at every preserving pause.
  "torch_memory_saver|${standins}:torch_memory_saver --executor host|1|9 passed, 1 failed, 4 not applicable,${tms} many_cycles [.][.][.] FAILED .case 1 of 1|"
  "torch_memory_saver_retain|${standins}:torch_memory_saver_retain --executor host|0|10 passed, 0 failed, 4 not applicable|"
  "torch_memory_saver_planted|${standins}:torch_memory_saver_retain --executor host --seed 7|1|${tms_planted}|pause_ignores_cpu_backup"
  # One live region per process: the properties that hold two regions get the adapter's refusal.
  "vllm|${standins}:vllm --executor host|1|7 passed, 3 failed, 4 not applicable,${vllm} swap_keeps_both [.][.][.] FAILED,${vllm} multi_device [.][.][.] FAILED,${vllm} adjacent_allocations [.][.][.] FAILED,a second region while 'offloadkit-region-[0-9]+' is live|"
  "vllm_planted|${standins}:vllm --executor host --seed 7|1|${vllm_planted}|wake_up_drops_backup"
  # Megatron's paged stash: graph capture, first-overflow status and the executor's fault
  # injection are not in its profile.
  "megatron_paged_stash|${standins}:megatron_paged_stash --executor host|0|7 passed, 0 failed, 3 not applicable|"
  "megatron_paged_stash_planted|${standins}:megatron_paged_stash --executor host --seed 7|1|5 passed, 2 failed, 3 not applicable,${mps} model_based [.][.][.] FAILED,${mps} batch_matches_per_key [.][.][.] FAILED|stashes_after_overflow")
foreach(entry IN LISTS adapter_checks)
  offloadkit_fields("${entry}" name arguments status expect defect)
  string(REPLACE "," ";" expect "${expect}")
  add_test(NAME python_module.adapter_${name}
    COMMAND ${CMAKE_COMMAND} -DPYTHON=${venv_python} -DWORK=${module_work} "-DARGS=${arguments}"
            -DEXPECT_RC=${status} "-DEXPECT=${expect}"
            -P ${PROJECT_SOURCE_DIR}/python/bridge/tests/expect_python_check.cmake)
  set(feature region)
  if(name MATCHES "^megatron_paged_stash")
    set(feature stash)
  endif()
  set_tests_properties(python_module.adapter_${name} PROPERTIES
    LABELS "cpu;python;property;${feature};adapters" TIMEOUT ${python_check_timeout}
    ENVIRONMENT "OFFLOADKIT_STANDIN_DEFECT=${defect}")
  list(APPEND module_tests python_module.adapter_${name})
endforeach()

# (through cmake -E env: the interpreter does not exist before python_module.pip_install runs)
add_test(NAME python_module.adapter_pytest
  COMMAND ${CMAKE_COMMAND} -E env ${venv_python} -m pytest -p no:cacheprovider -q
          ${adapters_dir}/pytest_adapter_batteries.py)
set_tests_properties(python_module.adapter_pytest PROPERTIES
  LABELS "cpu;python;property;region;adapters" TIMEOUT ${python_check_timeout}
  PASS_REGULAR_EXPRESSION "[0-9]+ passed" FAIL_REGULAR_EXPRESSION "[0-9]+ failed")
list(APPEND module_tests python_module.adapter_pytest)
# A battery whose properties hold while each property's process crashes at interpreter exit: the
# property items pass, and the battery's shutdown[host] item fails once, naming the crash.
add_test(NAME python_module.adapter_pytest_shutdown
  COMMAND ${CMAKE_COMMAND} -E env ${venv_python} -m pytest -p no:cacheprovider -q -rf
          ${adapters_dir}/pytest_shutdown_battery.py)
set_tests_properties(python_module.adapter_pytest_shutdown PROPERTIES
  LABELS "cpu;python;property;region;adapters" TIMEOUT ${python_check_timeout}
  PASS_REGULAR_EXPRESSION "10 of 10 properties' processes on the host executor crashed: signal 11 \\(SIGSEGV\\) after its result; each property's verdict stands.*\nFAILED [^\n]*::test_crashes_at_exit::shutdown\\[host\\]\n1 failed, 10 passed, 4 skipped")
list(APPEND module_tests python_module.adapter_pytest_shutdown)

# Through the command line: the libraries' default OffloadActivations(use_streams=True) is refused
# with what the protocol lacks (exit status 4).
set(refusals
  "torchtune_streams|offloadkit.adapters.torchtune:make|use_streams=True. cannot be driven through offloadkit's activation protocol|${adapters_dir}/standins"
  "trl_streams|offloadkit.adapters.trl:make|_current_graph_task_id|${adapters_dir}/standins")
foreach(entry IN LISTS refusals)
  offloadkit_fields("${entry}" name factory expect path)
  add_test(NAME python_module.adapter_refused_${name}
    COMMAND ${CMAKE_COMMAND} -DCOMMAND=${venv_python}
            "-DARGS=-m offloadkit check ${factory} --executor host" -DEXPECT_RC=4 "-DEXPECT=${expect}"
            -P ${PROJECT_SOURCE_DIR}/tools/expect_exit.cmake)
  set_tests_properties(python_module.adapter_refused_${name} PROPERTIES
    LABELS "cpu;python;adapters" TIMEOUT 60 ENVIRONMENT "PYTHONPATH=${path}")
  list(APPEND module_tests python_module.adapter_refused_${name})
endforeach()
