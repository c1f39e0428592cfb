// Internal: the macros that turn CUDA runtime and driver status codes into offloadkit's typed
// exceptions (RMM's CUDA_TRY model). A failed call throws with the call's text, file:line, the
// error's name and string; an allocation failure throws out_of_memory instead of cuda_error.
// Host-only C++ may include this: it needs only the CUDA headers, never libcuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "offloadkit/error.hpp"

namespace offloadkit::detail {

/// "cudaErrorX: text" for a runtime status.
inline std::string runtime_error_text(cudaError_t status) {
  return concat(cudaGetErrorName(status), ": ", cudaGetErrorString(status));
}

/// "CUDA_ERROR_X: text" for a driver status; the names come from the driver's own entry points
/// (obtained at run time), or "CUresult N" where no driver is loaded.
std::string driver_error_text(CUresult status);

[[noreturn]] inline void throw_runtime_status(cudaError_t status, const char* call,
                                              const char* file, int line,
                                              const std::string& context = {}) {
  std::string msg = concat(call, " failed: ", runtime_error_text(status));
  if (!context.empty()) msg = concat(msg, " (", context, ")");
  msg = concat(msg, " at ", file, ":", line);
  if (status == cudaErrorMemoryAllocation) throw out_of_memory(msg);
  throw cuda_error(msg, static_cast<int>(status));
}

[[noreturn]] inline void throw_driver_status(CUresult status, const char* call, const char* file,
                                             int line, const std::string& context = {}) {
  std::string msg = concat(call, " failed: ", driver_error_text(status));
  if (!context.empty()) msg = concat(msg, " (", context, ")");
  msg = concat(msg, " at ", file, ":", line);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory(msg);
  throw cuda_error(msg, static_cast<int>(status));
}

/// Noexcept paths: the failure is reported on stderr in debug builds and otherwise dropped, so
/// that a destructor never throws and never terminates the process.
void report_noexcept_failure(const char* call, const std::string& error, const char* file,
                             int line) noexcept;

}  // namespace offloadkit::detail

/// Runs a CUDA runtime call; on failure clears the (non-sticky) last error and throws cuda_error,
/// or out_of_memory for cudaErrorMemoryAllocation.
#define OFFLOADKIT_CUDA_TRY(call) OFFLOADKIT_CUDA_TRY_CTX(call, "")

/// OFFLOADKIT_CUDA_TRY with context streamed into the message, so that it names the values
/// involved: OFFLOADKIT_CUDA_TRY_CTX(cudaMalloc(&p, n), "bytes = ", n, " on device ", d).
#define OFFLOADKIT_CUDA_TRY_CTX(call, ...)                                                      \
  do {                                                                                          \
    const cudaError_t offloadkit_status_ = (call);                                              \
    if (offloadkit_status_ != cudaSuccess) {                                                    \
      (void)cudaGetLastError();                                                                 \
      ::offloadkit::detail::throw_runtime_status(offloadkit_status_, #call, __FILE__, __LINE__, \
                                                 ::offloadkit::detail::concat(__VA_ARGS__));    \
    }                                                                                           \
  } while (0)

/// Runs a CUDA driver call (through an entry-point pointer); throws cuda_error, or out_of_memory
/// for CUDA_ERROR_OUT_OF_MEMORY.
#define OFFLOADKIT_CU_TRY(call) OFFLOADKIT_CU_TRY_CTX(call, "")

/// OFFLOADKIT_CU_TRY with context, as OFFLOADKIT_CUDA_TRY_CTX.
#define OFFLOADKIT_CU_TRY_CTX(call, ...)                                                       \
  do {                                                                                         \
    const CUresult offloadkit_status_ = (call);                                                \
    if (offloadkit_status_ != CUDA_SUCCESS) {                                                  \
      ::offloadkit::detail::throw_driver_status(offloadkit_status_, #call, __FILE__, __LINE__, \
                                                ::offloadkit::detail::concat(__VA_ARGS__));    \
    }                                                                                          \
  } while (0)

/// For destructors and noexcept paths: never throws; clears the last error and reports the
/// failure in debug builds only.
#define OFFLOADKIT_CUDA_ASSERT_OK(call)                                                  \
  do {                                                                                   \
    const cudaError_t offloadkit_status_ = (call);                                       \
    if (offloadkit_status_ != cudaSuccess) {                                             \
      (void)cudaGetLastError();                                                          \
      ::offloadkit::detail::report_noexcept_failure(                                     \
          #call, ::offloadkit::detail::runtime_error_text(offloadkit_status_), __FILE__, \
          __LINE__);                                                                     \
    }                                                                                    \
  } while (0)

/// The driver twin of OFFLOADKIT_CUDA_ASSERT_OK.
#define OFFLOADKIT_CU_ASSERT_OK(call)                                                              \
  do {                                                                                             \
    const CUresult offloadkit_status_ = (call);                                                    \
    if (offloadkit_status_ != CUDA_SUCCESS) {                                                      \
      ::offloadkit::detail::report_noexcept_failure(                                               \
          #call, ::offloadkit::detail::driver_error_text(offloadkit_status_), __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)
