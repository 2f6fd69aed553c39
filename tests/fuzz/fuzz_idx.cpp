// IDX files (MNIST, Fashion-MNIST), plain or gzip: read_idx on any bytes.
#include <dtrain/data/idx.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& file = dtrain_fuzz::as_file(data, size, ".idx");
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto t = dtrain::data::read_idx(file);
    std::size_t n = 1;
    for (auto d : t.shape()) n *= d;
    if (n != t.size()) __builtin_trap();
  });
  return 0;
}
