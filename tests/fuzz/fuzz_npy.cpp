// NumPy .npy and .npz: the first byte picks the reader, the rest is the file.
#include <dtrain/data/npy.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool npz = data[0] & 1;
  const auto& file = dtrain_fuzz::as_file(data + 1, size - 1, npz ? ".npz" : ".npy");
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    if (npz) {
      for (const auto& [name, t] : dtrain::data::read_npz(file))
        if (t.size() && !t.data()) __builtin_trap();
    } else {
      const auto t = dtrain::data::read_npy(file);
      std::size_t n = 1;
      for (auto d : t.shape()) n *= d;
      if (n != t.size()) __builtin_trap();
    }
  });
  return 0;
}
