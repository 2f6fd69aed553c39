// tf.train.Example records: parse_single_example on any bytes, with features of every dtype and a
// default; a parsed feature has its shape's count of values.
#include <dtrain/data/tfrecord.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::data::feature_dtype;
  static const std::map<std::string, dtrain::data::fixed_len_feature> spec{
      {"x", {.shape = {2, 2}}},
      {"y", {.dtype = feature_dtype::int64, .default_value = std::vector<float>{0.0f}}},
      {"s", {.shape = {1}, .dtype = feature_dtype::string}}};
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto e = dtrain::data::parse_single_example({reinterpret_cast<const char*>(data), size}, spec);
    if (e.tensors.at("x").size() != 4 || e.tensors.at("y").size() != 1 || e.strings.at("s").size() != 1) __builtin_trap();
  });
  return 0;
}
