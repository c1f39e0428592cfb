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

# offloadkit_add_gtest(<target> SOURCES ... [LIBS ...] [LABELS ...] [GPU] [TIMEOUT s])
#
# Builds a GoogleTest binary linked with offloadkit's test main and registers it with ctest:
#   <target>.host : every test except the cuda ones, labels cpu + LABELS
#   <target>.cuda : (only with GPU) the tests whose suite or instantiation name holds "Cuda",
#                   labels gpu + LABELS; reported as skipped (return code 77, with the reason)
#                   on a machine without a usable GPU. GPU entries hold the resource lock `gpu`
#                   so that no two run at once: several checks compare the driver's free device
#                   memory before and after, which another process's allocations would disturb.
function(offloadkit_add_gtest target)
  cmake_parse_arguments(arg "GPU" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
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
    add_test(NAME ${target}.cuda COMMAND ${target} --gtest_filter=*Cuda* --offloadkit-require-gpu)
    set_tests_properties(${target}.cuda PROPERTIES LABELS "gpu;${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                         SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
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
