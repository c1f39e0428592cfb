// OFFLOADKIT_HD marks a function that runs both as device code (when compiled by nvcc) and as
// host code (when the host executor runs the same body over the same index space).
#pragma once

#if defined(__CUDACC__)
#define OFFLOADKIT_HD __host__ __device__
#else
#define OFFLOADKIT_HD
#endif
