# Tests of `python -m offloadkit ecosystem` (labels cpu, python, adapters), included by
# python/bridge/tests/CMakeLists.txt after adapters.cmake, inside its python_module block (venv,
# venv_python, module_work, python_check_timeout, module_tests): the whole path from the installed
# package to CONFORMANCE.md, in the test venv, on the host executor, with this build's offloadkit
# command. The region libraries run through their stand-ins (--factory, standin_factories.py);
# torchtune, TRL, PyTorch's save_on_cpu and Megatron-LM through their real adapters, whose
# libraries the venv cannot import: their columns say "not run" with the ImportError, and that is
# not a failure.
set(ecosystem_data ${CMAKE_CURRENT_LIST_DIR}/ecosystem)
set(ecosystem_out ${module_work}/ecosystem)
set(standins ${CMAKE_CURRENT_LIST_DIR}/standin_factories.py)
set(ecosystem_run "-m offloadkit ecosystem --executor host --cases 3 --jobs 2 --offloadkit $<TARGET_FILE:offloadkit>")
set(on_standins
  "--factory torch_memory_saver=${standins}:torch_memory_saver"
  "--factory torch_memory_saver-retain=${standins}:torch_memory_saver_retain"
  "--factory vllm=${standins}:vllm")
string(JOIN " " on_standins ${on_standins})

# ecosystem_test(NAME RUN <arguments> RC <exit status> FILE <file under the run's --out>
#                EXPECT_FILE <regex> [EXPECT_OUT <regex>] [EXPECT_ERR <regex>]): a run of
# `python -m offloadkit ecosystem` with --out ${ecosystem_out}/NAME, its exit status, and what its
# file, stdout and stderr must match (tools/expect_exit.cmake); the test is python_module.ecosystem_NAME.
function(ecosystem_test name)
  cmake_parse_arguments(PARSE_ARGV 1 E "" "RUN;RC;FILE;EXPECT_FILE;EXPECT_OUT;EXPECT_ERR" "")
  set(streams)
  foreach(stream OUT ERR)
    if(DEFINED E_EXPECT_${stream})
      list(APPEND streams "-DEXPECT_${stream}=${E_EXPECT_${stream}}")
    endif()
  endforeach()
  set(test python_module.ecosystem_${name})
  add_test(NAME ${test}
    COMMAND ${CMAKE_COMMAND} -DCOMMAND=${venv_python}
            "-DARGS=${E_RUN} --out ${ecosystem_out}/${name}" -DEXPECT_RC=${E_RC}
            -DFILE=${ecosystem_out}/${name}/${E_FILE} "-DEXPECT_FILE=${E_EXPECT_FILE}" ${streams}
            -P ${PROJECT_SOURCE_DIR}/tools/expect_exit.cmake)
  set_tests_properties(${test} PROPERTIES LABELS "cpu;python;adapters"
    TIMEOUT ${python_check_timeout})
  set(module_tests ${module_tests} ${test} PARENT_SCOPE)
endfunction()

# Every library with the stand-ins' classifications (ecosystem/standins.json: the shipped file's
# limitations; its defects of the real libraries, a crash at exit say, do not happen in the
# stand-ins and would be stale there): torch_memory_saver's defaults fail many_cycles
# (a pinned backup per pause, a documented limitation), its retain_cpu_backup column holds it, vLLM's
# three properties that hold two regions at once fail (one live region per process), every failure
# is classified (exit 0), and the libraries the venv lacks are columns of "not run" with the reason
# (save_on_cpu's, where the venv sees a PyTorch, as on a GPU machine: no property of its runs on the
# host executor).
set(nr "\\[not run\\]\\(#torchtune-not-run\\) \\| \\[not run\\]\\(#trl-not-run\\) \\| \\[not run\\]\\(#torch-save-on-cpu-not-run\\) \\| \\[not run\\]\\(#megatron-not-run\\) \\| \\[not run\\]\\(#megatron-paged-stash-not-run\\) \\|")
set(expect
  "8 libraries .5 not run here., 15 properties, 4 failures, every one classified"
  "\\| torch_memory_saver \\| 0\\.0\\.10b1\\+offloadkit\\.standin \\| `${standins}:torch_memory_saver` \\| the library's defaults[^|]*\\| host \\|[^|]+UTC \\|[^|]+\\| 10 hold, 1 fail, 4 n/a \\|"
  "\\| torchtune \\| - \\| `offloadkit\\.adapters\\.torchtune:make_single_stream` \\|[^|]+\\| - \\| - \\| - \\| not run: offloadkit\\.adapters\\.torchtune: the library module 'torchtune\\.training' cannot be imported here .No module named 'torchtune'.[^|]*\\|"
  "\\| property \\| torch_memory_saver \\| torch_memory_saver-retain \\| vllm \\| torchtune \\| trl \\| torch_save_on_cpu \\| megatron \\| megatron-paged-stash \\|"
  "\\| `region/swap_keeps_both` \\| holds \\| holds \\| \\*\\*\\[fails: limitation\\]\\(#vllm-region-swap-keeps-both\\)\\*\\* \\| ${nr}"
  "\\| `region/many_cycles` \\| \\*\\*\\[fails: limitation\\]\\(#torch-memory-saver-region-many-cycles\\)\\*\\* \\| holds \\| holds \\| ${nr}"
  "## Not run here"
  "<a id=.megatron-not-run.></a>\\*\\*megatron\\*\\* \\(`offloadkit\\.adapters\\.megatron:make_offload_all`\\): offloadkit\\.adapters\\.megatron: the library module 'megatron\\.core' cannot be imported here"
  "### torch_memory_saver: region/many_cycles \\(limitation\\)\n\n- evidence: torch_memory_saver's README \\(.CPU Backup.\\)[^\n]*\n- report: `torch_memory_saver\\.free-memory\\.json` \\(executor host\\)\n- seed: `[0-9]+`\n- reproduce: `[^`]*-m offloadkit check --executor host --feature region --implementation torch_memory_saver --property many_cycles")
string(JOIN ".*" expect ${expect})
ecosystem_test(standins
  RUN "${ecosystem_run} ${on_standins} --classified ${ecosystem_data}/standins.json"
  RC 0 FILE CONFORMANCE.md EXPECT_FILE "${expect}"
  EXPECT_OUT "conformance matrix: [^\n]*CONFORMANCE.md .8 libraries, 15 properties, 4 failures.*torch_memory_saver: 9 hold, 1 fail.*vllm: 7 hold, 3 fail.*trl: not run here: [^\n]*No module named 'trl'.*torch_save_on_cpu: not run here: [^\n]*(No module named 'torch'|has no property to run on the host executor)"
  EXPECT_ERR "\\[1/8\\] torch_memory_saver: .*\\[6/8\\] torch_save_on_cpu: .*\\[7/8\\] megatron: .*\\[8/8\\] megatron-paged-stash: ")

# Without a classification the same failure makes the run exit 1, listed as a problem; a
# classification of a property that holds is stale (exit 1).
ecosystem_test(unclassified
  RUN "${ecosystem_run} ${on_standins} --only torch_memory_saver --classified ${ecosystem_data}/none.json"
  RC 1 FILE CONFORMANCE.md
  EXPECT_FILE "1 libraries, 15 properties, 1 failures; 1 problem.*\\| `region/many_cycles` \\| \\*\\*\\[FAILS, unclassified\\].*## Problems\n\n- torch_memory_saver: region/many_cycles fails and is not classified"
  EXPECT_ERR "offloadkit conformance: torch_memory_saver: region/many_cycles fails and is not classified")
ecosystem_test(stale
  RUN "${ecosystem_run} ${on_standins} --only torch_memory_saver-retain --classified ${ecosystem_data}/stale.json"
  RC 1 FILE CONFORMANCE.md
  EXPECT_FILE "\\| `region/many_cycles` \\| holds \\|.*## Problems\n\n- torch_memory_saver-retain: region/many_cycles is classified as a limitation, but it holds now"
  EXPECT_ERR "offloadkit conformance: torch_memory_saver-retain: region/many_cycles is classified as a limitation, but it holds now")
# The driver-fault countdown's command line as the ecosystem builds it (with --cases and
# --timeout) is accepted by the check: it stops only where the cuda back end cannot run (exit 3,
# CUDA_VISIBLE_DEVICES emptied), never at bad usage, which left every fault column "not checked".
add_test(NAME python_module.ecosystem_fault_command
  COMMAND ${venv_python} ${CMAKE_CURRENT_LIST_DIR}/ecosystem_fault_command.py
          ${standins}:torch_memory_saver)
set_tests_properties(python_module.ecosystem_fault_command PROPERTIES
  LABELS "cpu;python;adapters" TIMEOUT 300)
list(APPEND module_tests python_module.ecosystem_fault_command)

# A library whose every property holds while each property's process crashes at interpreter exit
# (standin_factories.crashes_at_exit): one region/shutdown row fails (its properties hold), with
# the crash and the properties in its evidence; unclassified it makes the run exit 1, classified
# (ecosystem/shutdown.json) the matrix is complete (exit 0). The battery is checked whole (--jobs
# 1), so that its one report counts the crashes over all its properties.
set(shutdown_run "${ecosystem_run} --jobs 1 --only torch_memory_saver-retain --factory torch_memory_saver-retain=${standins}:crashes_at_exit")
set(shutdown_matrix "\\| `region/many_cycles` \\| holds \\|.*\\| `region/shutdown` \\| \\*\\*\\[")
ecosystem_test(shutdown
  RUN "${shutdown_run} --classified ${ecosystem_data}/none.json" RC 1 FILE CONFORMANCE.md
  EXPECT_FILE "${shutdown_matrix}FAILS, unclassified\\].*### torch_memory_saver-retain: region/shutdown \\(UNCLASSIFIED\\).*10 of 10 properties' processes crashed: signal 11 \\(SIGSEGV\\) after its result \\(model_based, [^)]*adjacent_allocations\\); each property's verdict stands"
  EXPECT_OUT "torch_memory_saver-retain: 10 hold, 0 fail, 4 not applicable, 0 skipped [^\n]*. shutdown: region: 10 of 10 properties' processes crashed"
  EXPECT_ERR "offloadkit conformance: torch_memory_saver-retain: region/shutdown fails and is not classified")
ecosystem_test(shutdown_classified
  RUN "${shutdown_run} --classified ${ecosystem_data}/shutdown.json" RC 0 FILE CONFORMANCE.md
  EXPECT_FILE "1 failures, every one classified.*${shutdown_matrix}fails: defect\\]")

# Side by side (--jobs 2), a library is checked in parts: Megatron's paged stash over its
# stand-in, the property that reads the device's free memory (multi_device) in a check of its own
# (megatron-paged-stash.free-memory.json), every other property's report of its own
# (megatron-paged-stash.PROPERTY.json), one column, the summary over them all.
ecosystem_test(split
  RUN "${ecosystem_run} --only megatron-paged-stash --factory megatron-paged-stash=${standins}:megatron_paged_stash --classified ${ecosystem_data}/none.json"
  RC 0 FILE conformance.json
  EXPECT_FILE "\"reports\": \\[\n *\"megatron-paged-stash\\.free-memory\\.json\",\n *\"megatron-paged-stash\\.round_trip_and_conservation\\.json\",\n *\"megatron-paged-stash\\.capacity_sweep_first_overflow\\.json\",.*\"megatron-paged-stash\\.graph_replay_row_counts\\.json\"\n *\\]"
  EXPECT_OUT "1 libraries, 11 properties, 0 failures.*megatron-paged-stash: 7 hold, 0 fail, 3 not applicable, 0 skipped .10 properties in 10 checks, the longest"
  EXPECT_ERR "  megatron-paged-stash\\.model_based: 1 hold, 0 fail")

# Refused before anything runs, with nothing on stdout: bad usage (2), offloadkit's C++ command
# not found (3), a classifications file that is not one (5).
set(ecosystem_usage_cases
  "executor|-m offloadkit ecosystem --executor gpu|offloadkit ecosystem: --executor: gpu is not one of the valid values auto, host, cuda"
  "cases_zero|-m offloadkit ecosystem --cases 0|offloadkit ecosystem: --cases: 0 is out of range: valid range 1..1000000"
  "jobs_zero|-m offloadkit ecosystem --jobs 0|offloadkit ecosystem: --jobs: 0 is out of range: valid range 1..64"
  "jobs_word|-m offloadkit ecosystem --jobs all|offloadkit ecosystem: --jobs: all is not an integer: valid range 1..64"
  "only|-m offloadkit ecosystem --only tms|offloadkit ecosystem: --only: tms is not one of the valid names torch_memory_saver, torch_memory_saver-retain, vllm, torchtune, trl, torch_save_on_cpu, megatron"
  "factory_shape|-m offloadkit ecosystem --factory vllm|offloadkit ecosystem: --factory: 'vllm' is not NAME=MODULE:FACTORY"
  "factory_name|-m offloadkit ecosystem --factory vlm=a.py:make|offloadkit ecosystem: --factory: vlm is not one of the valid names"
  "faults_on_host|-m offloadkit ecosystem --driver-faults --executor host|offloadkit ecosystem: --driver-faults: needs the cuda executor"
  "unknown_option|-m offloadkit ecosystem --fast|offloadkit ecosystem: --fast: unknown option: valid options are --help, --executor"
  "missing_value|-m offloadkit ecosystem --out|offloadkit ecosystem: --out: needs a value"
  "not_found|-m offloadkit ecosystem --offloadkit ${ecosystem_out}/no-such-offloadkit|offloadkit ecosystem: offloadkit's C.. command not found .--offloadkit: [^)]*/no-such-offloadkit.: name it with --offloadkit PATH or OFFLOADKIT=PATH|3"
  "classified|-m offloadkit ecosystem --offloadkit $<TARGET_FILE:offloadkit> --classified ${ecosystem_data}/bad_class.json|offloadkit ecosystem: --classified: [^:]*bad_class.json: at /libraries/vllm/0/class: 'adapter' is not one of the valid classes defect, limitation|5")
offloadkit_usage_tests(python_module.ecosystem_usage. COMMAND ${venv_python}
  LABELS cpu python adapters cli CASES ${ecosystem_usage_cases})
foreach(entry IN LISTS ecosystem_usage_cases)
  string(REGEX REPLACE "\\|.*" "" name "${entry}")
  list(APPEND module_tests python_module.ecosystem_usage.${name})
endforeach()
# `offloadkit` on PATH is the package's console script here (the venv's bin), told to find no
# program (OFFLOADKIT_PROGRAM=none), so that it has no conformance command: named as not the C++
# command (exit 3).
add_test(NAME python_module.ecosystem_console_script
  COMMAND ${CMAKE_COMMAND} -DCOMMAND=${venv_python} "-DARGS=-m offloadkit ecosystem"
          "-DEXPECT=offloadkit ecosystem: ${venv}/bin/offloadkit .PATH. is not offloadkit's C\\+\\+ command"
          -DEXPECT_RC=3 -P ${PROJECT_SOURCE_DIR}/tools/expect_usage_error.cmake)
set_tests_properties(python_module.ecosystem_console_script PROPERTIES
  LABELS "cpu;python;adapters;cli" TIMEOUT 60
  ENVIRONMENT "PATH=${venv}/bin;OFFLOADKIT=;OFFLOADKIT_PROGRAM=none")
add_test(NAME python_module.ecosystem_help
  COMMAND ${CMAKE_COMMAND} -E env ${venv_python} -m offloadkit ecosystem --help)
set_tests_properties(python_module.ecosystem_help PROPERTIES LABELS "cpu;python;adapters;cli"
  TIMEOUT 60
  PASS_REGULAR_EXPRESSION "usage: offloadkit ecosystem .*--executor NAME.*--classified FILE.*--offloadkit PATH.*--factory NAME=MODULE:FACTORY.*--driver-faults.*torch_memory_saver +region +offloadkit.adapters.torch_memory_saver:make.*megatron +activation.*exit status: 0 the matrix is complete")
list(APPEND module_tests python_module.ecosystem_console_script python_module.ecosystem_help)
