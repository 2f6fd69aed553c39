// BMP files: decode_bmp on any bytes, to its own channels and converted; a decoded image has the shape it
// claims and its values are bytes.
#include <dtrain/data/image.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // 64 KiB: a few bytes may claim a large image (a run-length encoded one that ends at once is legal and
  // all index 0), whose decoding takes time that is not a fault; a small cap keeps each run short
  dtrain::data::max_image_bytes = std::size_t(1) << 16;
  dtrain_fuzz::decode_every_way([&](int channels) { return dtrain::data::decode_bmp({data, size}, channels); });
  return 0;
}
