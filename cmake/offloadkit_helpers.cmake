# Build helpers shared by every folder: instrumentation flags and test registration.

# Sanitizer and coverage flags for host code (C++ and the host side of CUDA sources).
function(offloadkit_configure_instrumentation)
  set(flags "")
  if(OFFLOADKIT_SANITIZE STREQUAL "address")
    # One sanitizer per flag: nvcc splits -Xcompiler values at commas.
    set(flags -fsanitize=address -fsanitize=undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  elseif(OFFLOADKIT_SANITIZE STREQUAL "thread")
    set(flags -fsanitize=thread -fno-omit-frame-pointer)
  elseif(NOT OFFLOADKIT_SANITIZE STREQUAL "")
    message(FATAL_ERROR "OFFLOADKIT_SANITIZE='${OFFLOADKIT_SANITIZE}': valid values are '', 'address', 'thread'")
  endif()
  if(OFFLOADKIT_COVERAGE)
    list(APPEND flags --coverage -O0)
  endif()
  if(flags)
    foreach(f IN LISTS flags)
      add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${f}> $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${f}>)
      add_link_options(${f})
    endforeach()
  endif()
  set(OFFLOADKIT_INSTRUMENTED_FLAGS "${flags}" PARENT_SCOPE)
  # Instrumented builds run several times slower: test time limits grow with them.
  if(flags)
    set(OFFLOADKIT_TIMEOUT_SCALE 5 PARENT_SCOPE)
  else()
    set(OFFLOADKIT_TIMEOUT_SCALE 1 PARENT_SCOPE)
  endif()
endfunction()

# offloadkit_timeout(<out-var> <seconds>): a test's time limit, scaled for instrumented builds.
function(offloadkit_timeout out seconds)
  math(EXPR scaled "${seconds} * ${OFFLOADKIT_TIMEOUT_SCALE}")
  set(${out} ${scaled} PARENT_SCOPE)
endfunction()

# Warnings for the project's own targets.
function(offloadkit_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr>)
endfunction()

# offloadkit_library(<name> [STATIC] [ALIAS <alias>] SOURCES <files...> [LINKS <args...>]): one of the
# project's libraries, its public headers in the folder's include/ (installed under include/),
# LINKS handed to target_link_libraries as written (PUBLIC ... PRIVATE ...), and its warnings.
function(offloadkit_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "STATIC" "ALIAS" "SOURCES;LINKS")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "offloadkit_library(${name}): needs SOURCES, and takes only STATIC, ALIAS, "
      "SOURCES and LINKS (unexpected: '${arg_UNPARSED_ARGUMENTS}')")
  endif()
  set(type "")
  if(arg_STATIC)
    set(type STATIC)
  endif()
  add_library(${name} ${type} ${arg_SOURCES})
  if(arg_ALIAS)
    add_library(${arg_ALIAS} ALIAS ${name})
  endif()
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  if(arg_LINKS)
    target_link_libraries(${name} ${arg_LINKS})
  endif()
  offloadkit_warnings(${name})
endfunction()

set(OFFLOADKIT_GPU_LAUNCHER ${CMAKE_CURRENT_LIST_DIR}/gpu_test_launcher.sh)

# offloadkit_gpu_launcher(<out-var>): the words to put in front of a GPU test's command. With
# OFFLOADKIT_GPU_RESOURCE_GROUPS=ON: `sh .../cmake/gpu_test_launcher.sh`, which makes the GPUs
# that ctest allocated to the test its only visible devices; OFF: nothing. ctest resolves a target
# name only as a command's first word, so commands that follow the prefix name their programs with
# $<TARGET_FILE:...>.
function(offloadkit_gpu_launcher out)
  if(OFFLOADKIT_GPU_RESOURCE_GROUPS)
    set(${out} sh ${OFFLOADKIT_GPU_LAUNCHER} PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# offloadkit_gpu_test(<test>... [GPUS n]): marks tests that use GPUs (n of them, default 1), so that
# two of them never share a GPU: several checks compare the driver's free device memory before
# and after, which another process's allocations would disturb. Every GPU test goes through here,
# and its command starts with offloadkit_gpu_launcher()'s prefix.
#   OFFLOADKIT_GPU_RESOURCE_GROUPS=OFF (default): the resource lock `gpu`, so that no two GPU tests
#     run at once, whatever n (each sees every GPU).
#   ON: RESOURCE_GROUPS "n,gpus:1" (n groups of one GPU each). Run ctest with
#     `--resource-spec-file FILE` naming the GPUs (`{"version": {"major": 1, "minor": 0}, "local":
#     [{"gpus": [{"id": "0", "slots": 1}, {"id": "1", "slots": 1}]}]}`, ids as nvidia-smi
#     indexes; ci/gpu writes it): ctest then runs one GPU test per GPU at once and the launcher
#     shows each test only its own GPUs. Without a spec file ctest ignores the groups: GPU tests
#     may run at the same time, on every GPU. With a spec file that lists fewer than n GPUs, ctest
#     reports the test as failed ("Not Run", insufficient resources): exclude those (-LE multigpu).
function(offloadkit_gpu_test)
  cmake_parse_arguments(arg "" "GPUS" "" ${ARGN})
  if(NOT arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "offloadkit_gpu_test: no test named")
  endif()
  if(NOT DEFINED arg_GPUS)
    set(arg_GPUS 1)
  endif()
  if(NOT arg_GPUS MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "offloadkit_gpu_test(${arg_UNPARSED_ARGUMENTS}): GPUS = '${arg_GPUS}': "
                        "expected an integer >= 1")
  endif()
  if(OFFLOADKIT_GPU_RESOURCE_GROUPS)
    if(arg_GPUS EQUAL 1)
      set(groups "gpus:1")
    else()
      set(groups "${arg_GPUS},gpus:1")
    endif()
    set_tests_properties(${arg_UNPARSED_ARGUMENTS} PROPERTIES RESOURCE_GROUPS "${groups}")
  else()
    set_tests_properties(${arg_UNPARSED_ARGUMENTS} PROPERTIES RESOURCE_LOCK gpu)
  endif()
endfunction()

# offloadkit_add_gtest(<target> SOURCES ... [LIBS ...] [LABELS ...] [GPU [MULTIGPU]] [TIMEOUT s])
#
# Builds a GoogleTest binary linked with offloadkit's test main and registers it with ctest:
#   <target>.host     : every test except the cuda ones, labels cpu + LABELS
#   <target>.cuda     : (only with GPU) the tests whose suite or instantiation name holds "Cuda"
#                       (with MULTIGPU, less those under "CudaMultiGpu"), labels gpu + LABELS;
#                       reported as skipped (return code 77, with the reason) on a machine without
#                       a usable GPU. One GPU (offloadkit_gpu_test).
#   <target>.multigpu : (only with MULTIGPU) the tests under "CudaMultiGpu" (battery_tests.hpp puts
#                       there the properties that need two devices), labels gpu + multigpu +
#                       LABELS; skipped (77, "needs 2 GPUs, 1 usable") where fewer than two GPUs
#                       are usable, and reported as skipped where a test in it skips and none
#                       fails (testing_main.cpp). Two GPUs.
# A binary whose cuda tests include CudaMultiGpu ones needs MULTIGPU: where ctest gives each .cuda
# entry one GPU, they would skip inside a passing entry (cmake/tests checks every binary for it).
function(offloadkit_add_gtest target)
  cmake_parse_arguments(arg "GPU;MULTIGPU" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(arg_MULTIGPU AND NOT arg_GPU)
    message(FATAL_ERROR "offloadkit_add_gtest(${target}): MULTIGPU needs GPU too (the .multigpu "
                        "entry runs cuda tests)")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  offloadkit_timeout(arg_TIMEOUT ${arg_TIMEOUT})
  add_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE offloadkit_testing ${arg_LIBS})
  offloadkit_warnings(${target})
  add_test(NAME ${target}.host COMMAND ${target} --gtest_filter=-*Cuda*)
  set_tests_properties(${target}.host PROPERTIES LABELS "cpu;${arg_LABELS}" TIMEOUT ${arg_TIMEOUT})
  if(arg_GPU)
    offloadkit_gpu_launcher(launcher)
    set(cuda_filter "*Cuda*")
    if(arg_MULTIGPU)
      set(cuda_filter "*Cuda*:-*CudaMultiGpu*")
    endif()
    add_test(NAME ${target}.cuda
             COMMAND ${launcher} $<TARGET_FILE:${target}> --gtest_filter=${cuda_filter}
                     --offloadkit-require-gpu)
    set_tests_properties(${target}.cuda PROPERTIES LABELS "gpu;${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                         SKIP_RETURN_CODE 77)
    offloadkit_gpu_test(${target}.cuda)
  endif()
  if(arg_MULTIGPU)
    add_test(NAME ${target}.multigpu
             COMMAND ${launcher} $<TARGET_FILE:${target}> --gtest_filter=*CudaMultiGpu*
                     --offloadkit-require-gpu --offloadkit-require-devices=2)
    set_tests_properties(${target}.multigpu PROPERTIES LABELS "gpu;multigpu;${arg_LABELS}"
                         TIMEOUT ${arg_TIMEOUT} SKIP_RETURN_CODE 77
                         SKIP_REGULAR_EXPRESSION "OFFLOADKIT SKIPPED: [0-9]+ test")
    offloadkit_gpu_test(${target}.multigpu GPUS 2)
  endif()
endfunction()

# offloadkit_expect_crashes(<test>...): tests that check how a crash of code under test is reported
# ("crashed: signal 11 (SIGSEGV)"). The sanitizers turn a SIGSEGV into a report and an exit code
# (1 for AddressSanitizer, 66 for ThreadSanitizer); these tests let the signal through so that the
# crash is seen as it is without a sanitizer.
function(offloadkit_expect_crashes)
  if(OFFLOADKIT_SANITIZE STREQUAL "address")
    set_tests_properties(${ARGN} PROPERTIES
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:handle_segv=0")
  elseif(OFFLOADKIT_SANITIZE STREQUAL "thread")
    set_tests_properties(${ARGN} PROPERTIES
      ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 handle_segv=0")
  endif()
endfunction()

# offloadkit_fields(<row> <variable>...): the fields of a table row "a|b|c" (as the tests' case
# tables write them) into the variables named, in order; a variable past the row's last field is
# set empty.
function(offloadkit_fields row)
  string(REPLACE "|" ";" fields "${row}")
  list(LENGTH fields count)
  set(i 0)
  foreach(variable IN LISTS ARGN)
    set(value "")
    if(i LESS count)
      list(GET fields ${i} value)
    endif()
    set(${variable} "${value}" PARENT_SCOPE)
    math(EXPR i "${i} + 1")
  endforeach()
endfunction()

# offloadkit_usage_tests(<prefix> COMMAND <program> LABELS <labels...> CASES <case...>
#                        [WORKING_DIRECTORY <dir>])
# One test <prefix><name> per case "name|arguments|expected message[|exit code]": the program run
# with the (space-separated) arguments must be refused with the exit code (default 2, bad usage)
# and a message on stderr that matches the expected regular expression
# (tools/expect_usage_error.cmake).
function(offloadkit_usage_tests prefix)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "COMMAND;WORKING_DIRECTORY" "LABELS;CASES")
  foreach(entry IN LISTS arg_CASES)
    offloadkit_fields("${entry}" name arguments expect expect_rc)
    if(expect_rc STREQUAL "")
      set(expect_rc 2)
    endif()
    add_test(NAME ${prefix}${name}
      COMMAND ${CMAKE_COMMAND} -DCOMMAND=${arg_COMMAND} "-DARGS=${arguments}"
              "-DEXPECT=${expect}" -DEXPECT_RC=${expect_rc}
              -P ${PROJECT_SOURCE_DIR}/tools/expect_usage_error.cmake)
    set_tests_properties(${prefix}${name} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT 60)
    if(arg_WORKING_DIRECTORY)
      set_tests_properties(${prefix}${name} PROPERTIES WORKING_DIRECTORY ${arg_WORKING_DIRECTORY})
    endif()
  endforeach()
endfunction()

# offloadkit_help_test(<name> COMMAND <program> [<argument>...] LABELS <labels...> EXPECT <regex>)
# One test <name>: `<program> [<argument>...] --help` must exit 0 with output that matches the
# regular expression (the options and the exit statuses it documents).
function(offloadkit_help_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "EXPECT" "COMMAND;LABELS")
  add_test(NAME ${name} COMMAND ${arg_COMMAND} --help)
  set_tests_properties(${name} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT 60
    PASS_REGULAR_EXPRESSION "${arg_EXPECT}")
endfunction()
