// NVRTC compiles dtrain's CUDA kernels (backend/cuda/kernels.hpp) for every architecture this NVRTC
// supports, with no GPU: a CUDA C++ error in the kernels' source fails CI, not a user's first GPU run.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <dtrain/backend/cuda.hpp>

int main() {
  int count = 0;
  nvrtcGetNumSupportedArchs(&count);
  std::vector<int> archs(static_cast<std::size_t>(count));
  nvrtcGetSupportedArchs(archs.data());
  int failures = 0;
  for (int arch : archs) {
    try {
      const auto& code = dtrain::cuda_detail::compiled_kernels(arch / 10, arch % 10);
      const std::string_view image(code.data(), code.size());
      for (const char* name : dtrain::cuda_kernels::kernel_names)
        if (image.find(name) == std::string_view::npos) {
          std::printf("sm_%d: kernel %s is missing from the compiled image\n", arch, name);
          ++failures;
        }
      std::printf("sm_%d: %zu bytes, %d kernels\n", arch, code.size(), dtrain::cuda_kernels::kernel_count);
    } catch (const std::exception& e) {
      std::printf("sm_%d: %s\n", arch, e.what());
      ++failures;
    }
  }
  if (archs.empty() || failures) return 1;
  std::printf("PASS: the kernels compile for %zu architectures\n", archs.size());
  return 0;
}
