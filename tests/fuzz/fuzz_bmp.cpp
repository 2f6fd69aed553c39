// BMP files: decode_bmp on any bytes, to its own channels and converted; a decoded image has the shape it
// claims and its values are bytes.
#include <dtrain/data/image.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dtrain::data::max_image_bytes = std::size_t(1) << 20;  // 1 MiB: a few bytes may claim an image that takes
                                                         // seconds to decode, which is not a fault
  dtrain_fuzz::decode_every_way([&](int channels) { return dtrain::data::decode_bmp({data, size}, channels); });
  return 0;
}
