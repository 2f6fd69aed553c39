// dtrain's TFRecord reader and Example parser on files TensorFlow writes (tests/interop/check_tfrecord.py):
// each record parsed with the features "image" (2 x 3 floats), "label" (an int64), "ids" (3 int64s,
// default -1), "name" (one bytes value), printed as JSON; and the other way, examples given as JSON
// ([{"image": [6 floats], "label": n, "ids": [3 ints] (optional), "name": "..."}, ...]) serialized and
// written by dtrain's tfrecord_writer for TensorFlow to read. SequenceExamples both ways too: context
// "length" (an int64), "tags" (bytes, any number) and "weights" (floats, any number); feature lists
// "tokens" (an int64 a step), "frames" (2 floats a step), "words" (one bytes value a step).
// usage: interop_tfrecord <out.json> <compression_type: none, GZIP or ZLIB> <file>...
//        interop_tfrecord write <examples.json> <compression_type> <file>
//        interop_tfrecord read-sequences <out.json> <file>
//        interop_tfrecord write-sequences <sequences.json> <file>
#include <fstream>

#include <nlohmann/json.hpp>

#include <dtrain/data/tfrecord.hpp>

using namespace dtrain;
using json = nlohmann::json;

int main(int argc, char** argv) try {
  if (argc < 4) return 2;
  if (std::string(argv[1]) == "write") {
    if (argc != 5) return 2;
    data::tfrecord_writer w(argv[4], std::string(argv[3]) == "none" ? "" : argv[3]);
    for (const auto& e : json::parse(std::ifstream(argv[2]))) {
      std::map<std::string, data::feature> f{{"image", e.at("image").get<std::vector<float>>()},
                                             {"label", std::vector<std::int64_t>{e.at("label").get<std::int64_t>()}},
                                             {"name", std::vector<std::string>{e.at("name").get<std::string>()}}};
      if (e.contains("ids")) f["ids"] = e.at("ids").get<std::vector<std::int64_t>>();
      w.write(data::serialize_example(f));
    }
    w.close();
    return 0;
  }
  using data::feature_dtype;
  if (std::string(argv[1]) == "read-sequences") {
    const std::map<std::string, data::feature_spec> context{
        {"length", data::fixed_len_feature{.dtype = feature_dtype::int64}},
        {"tags", data::var_len_feature{feature_dtype::string}},
        {"weights", data::var_len_feature{feature_dtype::float32}}};
    const std::map<std::string, data::sequence_feature_spec> lists{
        {"tokens", data::fixed_len_sequence_feature{.dtype = feature_dtype::int64}},
        {"frames", data::fixed_len_sequence_feature{.shape = {2}}},
        {"words", data::fixed_len_sequence_feature{.dtype = feature_dtype::string, .allow_missing = true}},
        {"ragged", data::var_len_feature{feature_dtype::int64}}};
    json out = json::array();
    auto it = data::tfrecord_dataset({argv[3]}).iterate(0);
    while (const auto record = it.next()) {
      const auto e = data::parse_single_sequence_example(*record, context, lists);
      json r;
      for (const auto* part : {&e.context, &e.feature_lists}) {
        for (const auto& [name, t] : part->tensors) {
          r[name] = std::vector<float>(t.begin(), t.end());
          r[name + "_shape"] = std::vector<std::size_t>(t.shape().begin(), t.shape().end());
        }
        for (const auto& [name, v] : part->strings) r[name] = v;
      }
      for (const auto& [name, n] : e.lengths) r[name + "_lengths"] = n;
      out.push_back(r);
    }
    std::ofstream(argv[2]) << out.dump();
    return 0;
  }
  if (std::string(argv[1]) == "write-sequences") {
    data::tfrecord_writer w(argv[3]);
    for (const auto& e : json::parse(std::ifstream(argv[2]))) {
      std::map<std::string, std::vector<data::feature>> lists;
      for (auto v : e.at("tokens").get<std::vector<std::int64_t>>()) lists["tokens"].push_back(std::vector<std::int64_t>{v});
      for (const auto& f : e.at("frames")) lists["frames"].push_back(f.get<std::vector<float>>());
      for (const auto& f : e.at("ragged")) lists["ragged"].push_back(f.get<std::vector<std::int64_t>>());
      w.write(data::serialize_sequence_example(
          {{"length", std::vector<std::int64_t>{e.at("length").get<std::int64_t>()}},
           {"tags", e.at("tags").get<std::vector<std::string>>()}},
          lists));
    }
    w.close();
    return 0;
  }
  const std::string compression = std::string(argv[2]) == "none" ? "" : argv[2];
  const std::map<std::string, data::fixed_len_feature> spec{
      {"image", {.shape = {2, 3}}},
      {"label", {.dtype = data::feature_dtype::int64}},
      {"ids", {.shape = {3}, .dtype = data::feature_dtype::int64, .default_value = std::vector<float>{-1.0f}}},
      {"name", {.dtype = data::feature_dtype::string}}};
  json out = json::array();
  auto it = data::tfrecord_dataset(std::vector<std::string>(argv + 3, argv + argc), compression).iterate(0);
  while (const auto record = it.next()) {
    const auto e = data::parse_single_example(*record, spec);
    json r;
    for (const auto& [name, t] : e.tensors) r[name] = std::vector<float>(t.begin(), t.end());
    r["name"] = e.strings.at("name").at(0);
    out.push_back(r);
  }
  std::ofstream(argv[1]) << out.dump();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "interop_tfrecord: %s\n", e.what());
  return 1;
}
