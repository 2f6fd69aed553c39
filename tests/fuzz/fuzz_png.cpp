// PNG files: decode_png on any bytes, to its own channels and converted; a decoded image has the shape it
// claims and its values are bytes.
#include <dtrain/data/image.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dtrain::data::max_image_bytes = std::size_t(1) << 20;  // 1 MiB: a few bytes may claim an image that takes
                                                         // seconds to decode, which is not a fault
  for (int channels : {0, 1, 4})
    dtrain_fuzz::expect_only_dtrain_errors([&] {
      const auto t = dtrain::data::decode_png({data, size}, channels);
      if (t.dimension() != 3 || t.size() != t.shape()[0] * t.shape()[1] * t.shape()[2]) __builtin_trap();
      for (float v : t)
        if (!(v >= 0.0f && v <= 255.0f)) __builtin_trap();
    });
  return 0;
}
