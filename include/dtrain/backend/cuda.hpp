#pragma once
/// \file
/// `cuda`: the backend on an NVIDIA GPU (link `dtrain::cuda`: the CUDA runtime, cuBLAS and NVRTC; the
/// program still builds with a plain C++ compiler). The kernels are CUDA source held in
/// cuda/<family>.hpp (listed in cuda/kernels.hpp), compiled by NVRTC once per process for the device's
/// architecture, loaded as a library and launched through the runtime; GEMMs go to cuBLAS (FP32, no
/// TF32, as PyTorch's default); memory, recording and CUDA graph replay are cuda/device.hpp's. Every
/// failure is a `device_error` naming the device, the operation and its sizes; nothing aborts the
/// process.
///
/// `cuda{}` is device 0 through this thread's stream; `cuda(1)` device 1; `cuda(0, {.graphs = false})`
/// a stream of its own that launches every kernel as issued. `cuda_device_count()` is 0 (never an
/// error) on a machine without a GPU or driver.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/backend/cuda/device.hpp"
#include "dtrain/backend/cuda/kernels.hpp"

namespace dtrain {

/// CUDA devices this process can use (0 without a GPU or without a driver).
inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

namespace cuda_detail {

/// Makes `device` current for a scope and restores the caller's device after (a thread may drive
/// several devices, and cuBLAS handles and streams belong to the device current when they were made).
class device_guard {
 public:
  explicit device_guard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) (void)cudaGetLastError(), previous_ = -1;
    if (previous_ != device && cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
    else if (previous_ == device) previous_ = -1;
  }
  ~device_guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
};

inline std::string describe_error(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

/// The kernels as NVRTC compiles them for an architecture (sm_XY: a cubin; an architecture this NVRTC
/// does not know: PTX for the newest it knows below it, which the driver compiles), once per process.
inline const std::vector<char>& compiled_kernels(int major, int minor) {
  static std::mutex m;
  static std::map<int, std::vector<char>> cache;
  std::lock_guard lock(m);
  const int arch = major * 10 + minor;
  if (auto it = cache.find(arch); it != cache.end()) return it->second;
  int count = 0;
  nvrtcGetNumSupportedArchs(&count);
  std::vector<int> archs(static_cast<std::size_t>(count));
  if (count) nvrtcGetSupportedArchs(archs.data());
  const bool known = std::find(archs.begin(), archs.end(), arch) != archs.end();
  int virtual_arch = archs.empty() ? 90 : archs.front();  // the newest this NVRTC knows that the device runs
  for (int a : archs)
    if (a <= arch) virtual_arch = std::max(virtual_arch, a);
  const std::string target = known ? "--gpu-architecture=sm_" + std::to_string(arch)
                                   : "--gpu-architecture=compute_" + std::to_string(virtual_arch);
  const std::string source = cuda_kernels::source();
  nvrtcProgram p = nullptr;
  if (const auto r = nvrtcCreateProgram(&p, source.c_str(), "dtrain_kernels.cu", 0, nullptr, nullptr); r != NVRTC_SUCCESS)
    throw device_error(std::string("cuda: NVRTC cannot create the kernels' program: ") + nvrtcGetErrorString(r));
  const char* options[] = {target.c_str(), "--std=c++17"};
  const auto r = nvrtcCompileProgram(p, 2, options);
  if (r != NVRTC_SUCCESS) {
    std::size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(p, log.data());
    nvrtcDestroyProgram(&p);
    throw device_error("cuda: NVRTC failed to compile dtrain's kernels for " + target + ": " + nvrtcGetErrorString(r) +
                       "\n" + log);
  }
  std::size_t n = 0;
  std::vector<char> code;
  if (known) {
    nvrtcGetCUBINSize(p, &n);
    code.resize(n);
    nvrtcGetCUBIN(p, code.data());
  } else {
    nvrtcGetPTXSize(p, &n);
    code.resize(n);
    nvrtcGetPTX(p, code.data());
  }
  nvrtcDestroyProgram(&p);
  return cache[arch] = std::move(code);
}

inline const char* cublas_status(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "a cuBLAS error";
  }
}

}  // namespace cuda_detail

/// One CUDA device and one stream of it, through the CUDA runtime, cuBLAS and NVRTC.
class cuda_runtime {
 public:
  static constexpr const char* name = "cuda";
  static int device_count() { return cuda_device_count(); }

  explicit cuda_runtime(int device) : device_(device) {
    const int count = cuda_device_count();
    if (device < 0 || device >= count)
      throw device_error(count == 0 ? "cuda: no CUDA device (no GPU or no driver on this machine)"
                                    : "cuda: no CUDA device " + std::to_string(device) + " (this machine has " +
                                          std::to_string(count) + ")");
    try {
      open();
    } catch (...) {
      close();  // what was made before the failure
      throw;
    }
  }
  ~cuda_runtime() { close(); }
  cuda_runtime(const cuda_runtime&) = delete;
  cuda_runtime& operator=(const cuda_runtime&) = delete;

 private:
  void open() {
    const cuda_detail::device_guard on(device_);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_), "reading the device's properties");
    name_ = prop.name;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    if (const auto s = cublasCreate(&blas_); s != CUBLAS_STATUS_SUCCESS)
      throw device_error(describe() + ": cublasCreate failed: " + cuda_detail::cublas_status(s));
    cublasSetStream(blas_, stream_);
    // a workspace of its own, so that cuBLAS allocates nothing while a graph is captured
    check(cudaMalloc(&workspace_, workspace_bytes), "allocating cuBLAS' workspace of 32 MiB");
    cublasSetWorkspace(blas_, workspace_, workspace_bytes);
    const auto& code = cuda_detail::compiled_kernels(prop.major, prop.minor);
    check(cudaLibraryLoadData(&library_, code.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "loading dtrain's kernels (NVRTC output for sm_" + std::to_string(prop.major * 10 + prop.minor) + ")");
    for (int k = 0; k < cuda_kernels::kernel_count; ++k)
      check(cudaLibraryGetKernel(&kernels_[static_cast<std::size_t>(k)], library_, cuda_kernels::kernel_names[k]),
            std::string("finding kernel ") + cuda_kernels::kernel_names[k]);
  }
  void close() {
    const cuda_detail::device_guard on(device_);
    if (library_) cudaLibraryUnload(library_), library_ = nullptr;
    if (blas_) cublasDestroy(blas_), blas_ = nullptr;
    if (workspace_) cudaFree(workspace_), workspace_ = nullptr;
    if (stream_) cudaStreamDestroy(stream_), stream_ = nullptr;
  }

 public:
  std::string describe() const { return "cuda device " + std::to_string(device_) + " (" + name_ + ")"; }
  std::pair<std::size_t, std::size_t> memory_info() const {
    std::size_t free = 0, total = 0;
    const cuda_detail::device_guard on(device_);
    cudaMemGetInfo(&free, &total);
    return {free, total};
  }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

  void* allocate(std::size_t bytes) {
    const cuda_detail::device_guard on(device_);
    void* p = nullptr;
    const auto e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    check(e, "cudaMalloc of " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* p) {
    const cuda_detail::device_guard on(device_);
    cudaFree(p);
  }
  void* allocate_host(std::size_t bytes) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void deallocate_host(void* p) { cudaFreeHost(p); }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) {
    const cuda_detail::device_guard on(device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
          "an upload of " + std::to_string(bytes) + " bytes");
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    const cuda_detail::device_guard on(device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
          "a download of " + std::to_string(bytes) + " bytes");
  }
  void synchronize(const char* what) {
    const cuda_detail::device_guard on(device_);
    if (const auto e = cudaStreamSynchronize(stream_); e != cudaSuccess)
      throw device_error(describe() + ": " + what + " found that work issued before it failed: " +
                         cuda_detail::describe_error(e));
  }

  using node = cudaGraphNode_t;
  node launch(cuda_kernels::kernel k, unsigned grid, unsigned block, void** args) {
    const cuda_detail::device_guard on(device_);
    const auto e = cudaLaunchKernel(reinterpret_cast<const void*>(kernels_[static_cast<std::size_t>(k)]), dim3(grid),
                                    dim3(block), args, 0, stream_);
    check(e, std::string("launching ") + cuda_kernels::kernel_names[static_cast<int>(k)] + " on " +
                 std::to_string(grid) + " x " + std::to_string(block) + " threads");
    if (!capturing_) return nullptr;
    cudaStreamCaptureStatus status{};
    const cudaGraphNode_t* deps = nullptr;
    std::size_t count = 0;
#if CUDART_VERSION >= 13000
    check(cudaStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, &deps, nullptr, &count),
          "reading a captured kernel's node");
#else
    check(cudaStreamGetCaptureInfo_v2(stream_, &status, nullptr, nullptr, &deps, &count),
          "reading a captured kernel's node");
#endif
    return count ? deps[count - 1] : nullptr;
  }
  void gemm(const cuda_detail::gemm_call& g) {
    const cuda_detail::device_guard on(device_);
    const auto s = cublasSgemm(blas_, g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k,
                               &g.alpha, g.a, g.lda, g.b, g.ldb, &g.beta, g.c, g.ldc);
    if (s != CUBLAS_STATUS_SUCCESS)
      throw device_error(describe() + ": cublasSgemm (column-major " + std::to_string(g.m) + " x " + std::to_string(g.n) +
                         " x " + std::to_string(g.k) + ", lda " + std::to_string(g.lda) + ", ldb " + std::to_string(g.ldb) +
                         ", ldc " + std::to_string(g.ldc) + ") failed: " + cuda_detail::cublas_status(s));
  }

  /// A captured and instantiated graph.
  class graph {
   public:
    graph(cudaGraph_t g, cudaGraphExec_t e, const cuda_runtime& r) : g_(g), e_(e), r_(&r) {}
    graph(graph&& o) noexcept
        : g_(std::exchange(o.g_, nullptr)), e_(std::exchange(o.e_, nullptr)), r_(o.r_) {}
    graph& operator=(graph&& o) noexcept {
      std::swap(g_, o.g_), std::swap(e_, o.e_), std::swap(r_, o.r_);
      return *this;
    }
    ~graph() {
      if (e_) cudaGraphExecDestroy(e_);
      if (g_) cudaGraphDestroy(g_);
    }
    void update(node n, cuda_kernels::kernel k, unsigned grid, unsigned block, void** args) {
      cudaKernelNodeParams p{};
      p.func = reinterpret_cast<void*>(r_->kernels_[static_cast<std::size_t>(k)]);
      p.gridDim = dim3(grid);
      p.blockDim = dim3(block);
      p.sharedMemBytes = 0;
      p.kernelParams = args;
      r_->check(cudaGraphExecKernelNodeSetParams(e_, n, &p),
                std::string("updating a graph's ") + cuda_kernels::kernel_names[static_cast<int>(k)] + " node");
    }
    void launch() {
      const cuda_detail::device_guard on(r_->device_);
      r_->check(cudaGraphLaunch(e_, r_->stream_), "launching a step's CUDA graph");
    }

   private:
    cudaGraph_t g_;
    cudaGraphExec_t e_;
    const cuda_runtime* r_;
  };

  void begin_capture() {
    const cuda_detail::device_guard on(device_);
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "beginning a graph capture");
    capturing_ = true;
  }
  /// The captured graph, instantiated; nullopt when capture or instantiation failed (the work then runs
  /// as ordinary launches).
  std::optional<graph> end_capture() {
    const cuda_detail::device_guard on(device_);
    capturing_ = false;
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream_, &g) != cudaSuccess || !g) {
      (void)cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      return std::nullopt;
    }
    cudaGraphExec_t e = nullptr;
    if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      cudaGraphDestroy(g);
      return std::nullopt;
    }
    return graph(g, e, *this);
  }

 private:
  void check(cudaError_t e, const std::string& what) const {
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw device_error(describe() + ": " + what + " failed: " + cuda_detail::describe_error(e));
    }
  }

  static constexpr std::size_t workspace_bytes = std::size_t{32} << 20;
  int device_;
  std::string name_ = "?";
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  cudaLibrary_t library_ = nullptr;
  std::array<cudaKernel_t, cuda_kernels::kernel_count> kernels_{};
  bool capturing_ = false;
};

static_assert(device_runtime<cuda_runtime>);

/// The CUDA backend: `cuda{}` (device 0), `cuda(device)`, `cuda(device, cuda_options{...})`.
using cuda = basic_cuda<cuda_runtime>;
static_assert(backend<cuda>);

}  // namespace dtrain
