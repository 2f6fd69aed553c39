// dtrain's TFRecord reader and Example parser on files TensorFlow writes (tests/interop/check_tfrecord.py):
// each record parsed with the features "image" (2 x 3 floats), "label" (an int64), "ids" (3 int64s,
// default -1), "name" (one bytes value), printed as JSON; and the other way, examples given as JSON
// ([{"image": [6 floats], "label": n, "ids": [3 ints] (optional), "name": "..."}, ...]) serialized and
// written by dtrain's tfrecord_writer for TensorFlow to read.
// usage: interop_tfrecord <out.json> <compression_type: none, GZIP or ZLIB> <file>...
//        interop_tfrecord write <examples.json> <compression_type> <file>
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
