// NVRTC compiles dtrain's CUDA kernels (every family's source in backend/cuda/, one program) with no
// GPU, for the oldest and the newest architecture this NVRTC supports and for Hopper (sm_90, the GPU
// dtrain is measured on): a CUDA C++ error in the kernels' source fails CI, not a user's first GPU run.
// (Every architecture: 12 x ~5 s.)
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <dtrain/backend/cuda.hpp>

int main() {
  int count = 0;
  nvrtcGetNumSupportedArchs(&count);
  std::vector<int> supported(static_cast<std::size_t>(count));
  nvrtcGetSupportedArchs(supported.data());
  std::vector<int> archs;
  if (!supported.empty()) archs = {supported.front(), supported.back()};
  if (std::find(supported.begin(), supported.end(), 90) != supported.end()) archs.insert(archs.begin() + 1, 90);
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
  if (archs.empty() || failures) return 1;  // no architecture: NVRTC itself is broken
  std::printf("PASS: the kernels compile for %zu architectures\n", archs.size());
  return 0;
}
