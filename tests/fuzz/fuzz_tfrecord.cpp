// TFRecord files: tfrecord_dataset on any bytes, plain and as a gzip stream; every record comes out whole
// (its checksum held) or the file is a named error.
#include <dtrain/data/tfrecord.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = dtrain_fuzz::as_file(data, size, ".tfrecord").string();
  for (const char* compression : {"", "GZIP", "ZLIB"})
    dtrain_fuzz::expect_only_dtrain_errors([&] {
      auto it = dtrain::data::tfrecord_dataset({file}, compression).iterate(0);
      std::size_t total = 0;
      while (const auto r = it.next()) total += r->size() + 16;
      if (*compression == '\0' && total != size) __builtin_trap();  // every byte was in a record
    });
  return 0;
}
