// GIF files: decode_image on any bytes (the first frame, to its own channels and converted) and
// decode_gif (every frame); a decoded image has the shape it claims and its values are bytes.
#include <dtrain/data/image.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dtrain::data::max_image_bytes = std::size_t(1) << 20;  // 1 MiB: a few bytes may claim an image that takes
                                                         // seconds to decode, which is not a fault
  const std::span<const unsigned char> bytes(data, size);
  if (size < 4 || std::memcmp(data, "GIF8", 4) != 0) return 0;  // (decode_image would take it for another format)
  dtrain_fuzz::decode_every_way([&](int channels) { return dtrain::data::decode_image(bytes, channels); });
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto t = dtrain::data::decode_gif(bytes);
    if (t.dimension() != 4 || t.shape()[3] != 3 || t.size() != t.shape()[0] * t.shape()[1] * t.shape()[2] * 3) __builtin_trap();
    for (float v : t)
      if (!(v >= 0.0f && v <= 255.0f)) __builtin_trap();
  });
  return 0;
}
