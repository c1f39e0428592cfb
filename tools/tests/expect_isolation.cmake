# Crash isolation of the check command, through check_isolation_fixture (whose properties
# misbehave on purpose):
#   cmake -DFIXTURE=<path of check_isolation_fixture> -P expect_isolation.cmake
# Checks that the run finishes, that each misbehaving property is one FAILED row naming its
# signal, exit code or time limit, that the passing property after them is reported ok, that a
# process that crashes or hangs at exit after its result keeps its property's verdict and is one
# shutdown finding (a hang stopped --shutdown-grace after the result, not at --timeout), that the
# exit status is 1, and that the printed reproduce commands replay the failures exactly.
cmake_minimum_required(VERSION 3.25)

function(fail what)
  message(FATAL_ERROR "${what}\n--- stdout:\n${out}\n--- stderr:\n${err}")
endfunction()

function(expect_match text regex what)
  if(NOT text MATCHES "${regex}")
    fail("${what}: no match for '${regex}'")
  endif()
endfunction()

function(expect_contains text literal what)
  string(FIND "${text}" "${literal}" at)
  if(at EQUAL -1)
    fail("${what}: '${literal}' not found")
  endif()
endfunction()

# Runs the fixture with ARGN; sets out, err and rc in the caller.
macro(run_fixture)
  execute_process(COMMAND ${FIXTURE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 90)
endmacro()

# The reproduce command printed for `property`, as a list of arguments with the fixture's path in
# place of its name. Sets `replay` (and `debug`, the --in-process variant after "gdb --args").
macro(reproduce_of property)
  string(REGEX MATCH "reproduce: check_isolation_fixture check [^\n]* --property ${property} [^\n]*"
         line "${out}")
  if(NOT line)
    fail("no reproduce command printed for ${property}")
  endif()
  string(REPLACE "reproduce: check_isolation_fixture " "" line "${line}")
  separate_arguments(replay UNIX_COMMAND "${line}")
  string(REGEX MATCH "in a debugger: gdb --args check_isolation_fixture check [^\n]* --property ${property} [^\n]*"
         debug_line "${out}")
  set(debug "")
  if(debug_line)
    string(REPLACE "in a debugger: gdb --args check_isolation_fixture " "" debug_line "${debug_line}")
    separate_arguments(debug UNIX_COMMAND "${debug_line}")
  endif()
endmacro()

# 1. The whole run: every property, each in its own process, two seconds before a hang is stopped,
#    one second for a process to exit after its result.
run_fixture(check --executor host --seed 42 --timeout 2 --shutdown-grace 1)
if(NOT rc EQUAL 1)
  fail("expected exit status 1 from the run, got '${rc}'")
endif()
set(row "fixture +\\| misbehaving +\\| ")
expect_match("${out}" "${row}passes_first +\\| host +\\| +5 \\| ok +\\|\n" "the first property passes")
expect_match("${out}" "${row}fails +\\| host +\\| +[0-9]+ \\| FAILED +\\| 42\n"
             "an ordinary failure is its own row")
expect_match("${out}" "${row}segfaults +\\| host +\\| +- \\| FAILED, crashed: signal 11 \\(SIGSEGV\\) +\\| 42\n"
             "a segfault is one row naming SIGSEGV")
expect_match("${out}" "${row}aborts +\\| host +\\| +- \\| FAILED, crashed: signal 6 \\(SIGABRT\\) +\\| 42\n"
             "an abort is one row naming SIGABRT")
expect_match("${out}" "${row}exits +\\| host +\\| +- \\| FAILED, exited with code 1 without a result +\\| 42\n"
             "exit(1) is one row naming the exit code")
expect_match("${out}" "${row}hangs +\\| host +\\| +- \\| FAILED, timed out after 2 s +\\| 42\n"
             "a hang is one row naming the time limit")
expect_match("${out}" "${row}exits_leaving_a_process +\\| host +\\| +- \\| FAILED, exited with code 0 without a result +\\| 42\n"
             "a process left holding the output does not hold up the run")
expect_match("${out}" "${row}crashes_on_exit +\\| host +\\| +5 \\| ok +\\|\n"
             "a crash after the result keeps the property's verdict")
expect_match("${out}" "crashes_on_exit \\.\\.\\. ok \\(5 cases, [0-9.]+ s; shutdown: crashed: signal 11 \\(SIGSEGV\\) after its result\\)"
             "the progress line says how the process ended")
expect_match("${out}" "${row}passes_last +\\| host +\\| +5 \\| ok +\\|\n"
             "the property after the crashes still runs and passes")
expect_match("${out}" "${row}hangs_on_exit +\\| host +\\| +5 \\| ok +\\|\n"
             "a hang after the result keeps the property's verdict")
expect_match("${out}" "\n4 passed, 6 failed, " "the summary counts every row")
expect_match("${out}" "\nshutdown: fixture: 1 of 5 properties' processes crashed: signal 11 \\(SIGSEGV\\) after its result \\(their verdicts stand\\): crashes_on_exit\n"
             "a crash at exit is one shutdown finding")
expect_match("${out}" "\nshutdown: fixture: 1 of 5 properties' processes still running 1 s after its result \\(killed\\) \\(their verdicts stand\\): hangs_on_exit\n(      [^\n]*\n)*      reproduce: check_isolation_fixture check [^\n]*--property hangs_on_exit"
             "a hang at exit is one shutdown finding, stopped by the grace")
expect_match("${out}" "      \\| fixture: about to store to an unmapped address\n"
             "a crash shows the last lines of its output")
expect_match("${out}" "      \\| fixture: giving up with exit\\(1\\)\n"
             "an early exit shows the last lines of its output")
# One row per property: ten rows, and the progress lines came out whole (no child output between
# a property's name and its result).
string(REGEX MATCHALL "\n${row}" rows "${out}")
list(LENGTH rows row_count)
if(NOT row_count EQUAL 10)
  fail("expected 10 table rows, got ${row_count}")
endif()
string(REGEX MATCHALL "\n\\[ ?[0-9]+/10\\] fixture/misbehaving [a-z_]+ \\.\\.\\. (ok|FAILED) \\(" progress "${out}")
list(LENGTH progress progress_count)
if(NOT progress_count EQUAL 10)
  fail("expected 10 whole progress lines, got ${progress_count}")
endif()
set(whole_run "${out}")

# 2. The printed reproduce commands replay each failure the same way.
foreach(entry "segfaults|crashed: signal 11 \\(SIGSEGV\\)" "exits|exited with code 1 without a result"
              "hangs|timed out after 2 s")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 property)
  list(GET parts 1 expect)
  set(out "${whole_run}")
  reproduce_of(${property})
  if(NOT debug)
    fail("no in-process (debugger) command printed for ${property}")
  endif()
  run_fixture(${replay})
  if(NOT rc EQUAL 1)
    fail("the reproduce command of ${property} exited with '${rc}', expected 1")
  endif()
  expect_match("${out}" "${row}${property} +\\| host +\\| +- \\| FAILED, ${expect} +\\| 42\n"
               "the reproduce command of ${property} fails the same way")
  expect_match("${out}" "\n0 passed, 1 failed, " "the reproduce command runs one property")
endforeach()

# The debugger command runs the property in this process: the crash is the process's own.
set(out "${whole_run}")
reproduce_of(segfaults)
run_fixture(${debug})
if(NOT rc MATCHES "Segmentation fault|11")
  fail("the in-process command of segfaults ended with '${rc}', expected a segfault")
endif()

# An ordinary failure replays to the same failing case, isolated or in-process.
set(out "${whole_run}")
string(REGEX MATCH "fails \\.\\.\\. FAILED \\(case [0-9]+ of 5, " first_failure "${out}")
if(NOT first_failure)
  fail("no progress line for the ordinary failure")
endif()
reproduce_of(fails)
if(debug)
  fail("an ordinary failure needs no debugger command, got '${debug}'")
endif()
run_fixture(${replay})
expect_contains("${out}" "${first_failure}" "the replay fails at the same case")
run_fixture(${replay} --in-process)
expect_contains("${out}" "${first_failure}" "the in-process replay fails at the same case")

# 3. --cases raises the count as well as lowering it, in a child and in-process.
foreach(mode "" "--in-process")
  run_fixture(check --executor host --property passes_first --cases 37 --seed 5 ${mode})
  if(NOT rc EQUAL 0)
    fail("expected exit status 0 from --cases 37 ${mode}, got '${rc}'")
  endif()
  expect_match("${out}" "passes_first \\.\\.\\. ok \\(37 cases" "--cases 37 ${mode} runs 37 cases")
  run_fixture(check --executor host --property passes_first --cases 2 --seed 5 ${mode})
  expect_match("${out}" "passes_first \\.\\.\\. ok \\(2 cases" "--cases 2 ${mode} runs 2 cases")
endforeach()

# 4. A process that hangs at exit costs --shutdown-grace, not --timeout: with a minute's limit the
#    run ends within seconds (execute_process gives it 20), the property ok, the hang a finding.
execute_process(COMMAND ${FIXTURE} check --executor host --seed 42 --property hangs_on_exit
                        --timeout 60 --shutdown-grace 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 20)
if(NOT rc EQUAL 1)
  fail("expected exit status 1 (a shutdown finding) within 20 s from hangs_on_exit, got '${rc}'")
endif()
expect_match("${out}" "\n1 passed, 0 failed, " "the property holds")
expect_match("${out}" "\nshutdown: fixture: 1 of 1 properties' processes still running 1 s after its result \\(killed\\)"
             "the hang at exit is stopped by the grace")

message(STATUS "crash isolation works:\n${whole_run}")
