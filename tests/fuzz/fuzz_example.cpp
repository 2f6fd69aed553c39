// tf.train.Example and SequenceExample records: parse_single_example and parse_single_sequence_example on
// any bytes, with fixed- and variable-length features of every dtype, a default and feature lists; a
// parsed feature has its shape's count of values, a feature list its steps times the step's.
#include <dtrain/data/tfrecord.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::data::feature_dtype;
  using dtrain::data::fixed_len_feature;
  using dtrain::data::var_len_feature;
  static const std::map<std::string, dtrain::data::feature_spec> spec{
      {"x", fixed_len_feature{.shape = {2, 2}}},
      {"y", fixed_len_feature{.dtype = feature_dtype::int64, .default_value = std::vector<float>{0.0f}}},
      {"s", fixed_len_feature{.shape = {1}, .dtype = feature_dtype::string}},
      {"v", var_len_feature{feature_dtype::int64}}};
  static const std::map<std::string, dtrain::data::sequence_feature_spec> lists{
      {"f", dtrain::data::fixed_len_sequence_feature{.shape = {2}}},
      {"t", dtrain::data::fixed_len_sequence_feature{.dtype = feature_dtype::int64, .allow_missing = true}},
      {"r", var_len_feature{}}};
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto e = dtrain::data::parse_single_example(bytes, spec);
    if (e.tensors.at("x").size() != 4 || e.tensors.at("y").size() != 1 || e.strings.at("s").size() != 1 ||
        e.tensors.at("v").dimension() != 1)
      __builtin_trap();
  });
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto e = dtrain::data::parse_single_sequence_example(bytes, {{"v", var_len_feature{}}}, lists);
    const auto& f = e.feature_lists.tensors.at("f");
    if (f.dimension() != 2 || f.shape()[1] != 2 || e.feature_lists.tensors.at("t").dimension() != 1) __builtin_trap();
    std::size_t values = 0;
    for (std::size_t n : e.lengths.at("r")) values += n;
    if (values != e.feature_lists.tensors.at("r").size()) __builtin_trap();
  });
  return 0;
}
