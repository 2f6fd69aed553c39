// JPEG files: decode_jpeg on any bytes (gray and RGB, both IDCTs); a decoded image has the shape it
// claims and its values are bytes.
#include <dtrain/data/image.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dtrain::data::max_image_bytes = std::size_t(1) << 20;  // 1 MiB: a few bytes may claim an image that takes
                                                         // seconds to decode, which is not a fault
  for (int channels : {0, 1})
    dtrain_fuzz::expect_only_dtrain_errors([&] {
      const auto t = dtrain::data::decode_jpeg({data, size}, channels, channels == 0);
      if (t.dimension() != 3 || t.size() != t.shape()[0] * t.shape()[1] * t.shape()[2]) __builtin_trap();
      for (float v : t)
        if (!(v >= 0.0f && v <= 255.0f)) __builtin_trap();
    });
  return 0;
}
