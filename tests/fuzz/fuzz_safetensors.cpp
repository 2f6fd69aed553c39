// safetensors files (weights, checkpoints, backups): load_safetensors on any bytes.
#include <dtrain/checkpoint/safetensors.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& file = dtrain_fuzz::as_file(data, size, ".safetensors");
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto f = dtrain::checkpoint::load_safetensors(file);
    for (const auto& t : f.tensors) {  // what it returns is consistent: every shape's product is its data's size
      std::size_t n = 1;
      for (auto d : t.shape) n *= d;
      if (!t.data.empty() && !t.int64.empty()) __builtin_trap();  // float32 or int64, never both
      if (n != (t.int64.empty() ? t.data.size() : t.int64.size())) __builtin_trap();
    }
  });
  return 0;
}
