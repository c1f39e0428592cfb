// A small CUDA program for `offloadkit capture` to record on a GPU: two NVTX steps, each with a
// kernel on one stream and pinned D2H/H2D copies on another, one pinned allocation before the
// first step and one (planted) inside the second. Exits 3 where no GPU is usable, as offloadkit
// does.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>

__global__ void spin(float* p, int n, int iterations) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = p[i];
  for (int k = 0; k < iterations; ++k) x = x * 0.999f + 0.001f;
  p[i] = x;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no usable GPU\n");
    return 3;
  }
  constexpr int n = 1 << 24;
  constexpr size_t bytes = n * sizeof(float);
  float *a = nullptr, *b = nullptr, *host = nullptr, *late = nullptr;
  cudaStream_t compute, copy;
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault);
  for (int step = 0; step < 2; ++step) {
    char name[32];
    std::snprintf(name, sizeof name, "step %d", step);
    nvtxRangePushA(name);
    spin<<<(n + 255) / 256, 256, 0, compute>>>(a, n, 4000);
    cudaMemcpyAsync(host, b, bytes, cudaMemcpyDeviceToHost, copy);
    cudaMemcpyAsync(b, host, bytes, cudaMemcpyHostToDevice, copy);
    if (step == 1) cudaMallocHost(reinterpret_cast<void**>(&late), 1 << 20);
    cudaStreamSynchronize(copy);
    cudaStreamSynchronize(compute);
    nvtxRangePop();
  }
  cudaFreeHost(late);
  cudaFreeHost(host);
  cudaFree(a);
  cudaFree(b);
  const cudaError_t e = cudaGetLastError();
  std::printf("capture_target: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
