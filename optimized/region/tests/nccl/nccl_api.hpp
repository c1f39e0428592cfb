// NCCL's C API as nccl_region_test uses it, loaded with dlopen at run time: nothing links
// libnccl, so the binary starts (and its GPU test skips) where NCCL is not installed. The few
// types and entry points are declared here from NCCL's documented ABI (nccl.h): ncclComm_t is an
// opaque pointer, and ncclResult_t, ncclDataType_t and ncclRedOp_t are int-sized C enums whose
// values are fixed by the header (ncclSuccess = 0, ncclFloat32 = 7, ncclSum = 0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

namespace offloadkit::multigpu {

/// ncclResult_t.
enum nccl_result : int {
  nccl_success = 0,
  nccl_unhandled_cuda_error = 1,
  nccl_system_error = 2,
  nccl_internal_error = 3,
  nccl_invalid_argument = 4,
  nccl_invalid_usage = 5,
  nccl_remote_error = 6,
  nccl_in_progress = 7,
  nccl_timeout = 8,
};

/// ncclDataType_t (only the value used here).
enum nccl_data_type : int { nccl_float32 = 7 };

/// ncclRedOp_t (only the value used here).
enum nccl_red_op : int { nccl_sum = 0 };

/// ncclComm_t: a pointer to NCCL's opaque struct ncclComm.
struct nccl_comm;
using nccl_comm_t = nccl_comm*;

/// The entry points, resolved from one loaded libnccl. Optional ones are null where the library
/// is older than the call (ncclCommRegister: NCCL 2.19; ncclCommFinalize: 2.14).
struct nccl_api {
  std::string path;  ///< the file the entry points come from
  int version = 0;   ///< ncclGetVersion's code: major * 10000 + minor * 100 + patch (2.9 and later)

  nccl_result (*get_version)(int* version) = nullptr;
  const char* (*get_error_string)(nccl_result result) = nullptr;
  nccl_result (*comm_init_all)(nccl_comm_t* comms, int ndev, const int* devlist) = nullptr;
  nccl_result (*comm_destroy)(nccl_comm_t comm) = nullptr;
  nccl_result (*group_start)() = nullptr;
  nccl_result (*group_end)() = nullptr;
  nccl_result (*all_reduce)(const void* sendbuff, void* recvbuff, std::size_t count,
                            nccl_data_type datatype, nccl_red_op op, nccl_comm_t comm,
                            cudaStream_t stream) = nullptr;
  // Optional.
  const char* (*get_last_error)(nccl_comm_t comm) = nullptr;
  nccl_result (*comm_get_async_error)(nccl_comm_t comm, nccl_result* async_error) = nullptr;
  nccl_result (*comm_finalize)(nccl_comm_t comm) = nullptr;
  nccl_result (*comm_register)(nccl_comm_t comm, void* buff, std::size_t size,
                               void** handle) = nullptr;
  nccl_result (*comm_deregister)(nccl_comm_t comm, void* handle) = nullptr;

  /// "2.27.3" from `version`.
  [[nodiscard]] std::string version_text() const;
  /// "ncclInvalidUsage (5): <NCCL's string>[; last error: <ncclGetLastError>]".
  [[nodiscard]] std::string error_text(nccl_result result, nccl_comm_t comm = nullptr) const;
};

/// The outcome of find_nccl(): the library loaded, or why none was.
struct nccl_search {
  bool loaded = false;
  nccl_api api;
  /// Every candidate tried before the one loaded (or all of them), each as "what: why not".
  std::vector<std::string> attempts;
  /// The folders looked in for the pip wheel's library (python's sys.path entries).
  std::vector<std::string> python_paths;
  /// One paragraph naming everything searched, for a skip reason.
  [[nodiscard]] std::string summary() const;
};

/// Loads NCCL, trying in order: the file named by OFFLOADKIT_NCCL_LIBRARY; libnccl.so.2 on the
/// dynamic loader's search path; the pip wheels' folders (nvidia/nccl/lib, nvidia/cu13/lib,
/// nvidia/cu12/lib, torch/lib) under every sys.path entry of the Python interpreter named by
/// OFFLOADKIT_PYTHON (default: python3 on PATH, then /usr/bin/python3). The first file that loads
/// and has every required entry point wins. Never throws for a library that is missing or
/// unusable: that is a result.
nccl_search find_nccl();

}  // namespace offloadkit::multigpu
