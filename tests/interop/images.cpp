// dtrain's image decoders and resize on files a Python check writes with Pillow
// (tests/interop/check_images.py). Reads cases as JSON, each
//   {"path": <a PNG or JPEG file>, "channels": 0, 1, 2, 3 or 4, "size": [height, width] or null,
//    "aspect": "stretch" (or absent), "crop" or "pad"}
//   -> {"shape": the decoded (and resized) image's shape, "values": its values}.
// usage: interop_images <cases.json> <out.json>
//        interop_images directory <folder> <labels.json: a list, or "inferred"> <out.json>: the unshuffled
//        image_dataset_from_directory of the folder (images 4 x 4), each image's mean and label in order
#include <fstream>

#include <nlohmann/json.hpp>

#include <dtrain/data/image.hpp>

using namespace dtrain;
using json = nlohmann::json;

int main(int argc, char** argv) try {
  if (argc == 5 && std::string(argv[1]) == "directory") {
    const json labels = json::parse(std::ifstream(argv[3]));
    data::image_directory_options o{.image_size = {4, 4}, .shuffle = false, .verbose = false};
    if (labels.is_array()) o.labels = labels.get<std::vector<int>>();
    json out = json::array();
    auto it = data::image_dataset_from_directory(argv[2], o).iterate(0);
    while (const auto b = it.next())
      for (std::size_t i = 0; i < b->first.shape()[0]; ++i) {
        const float* x = b->first.data() + i * 4 * 4 * 3;
        double sum = 0;
        for (std::size_t k = 0; k < 4 * 4 * 3; ++k) sum += x[k];
        out.push_back({{"mean", sum / 48.0}, {"label", b->second.data()[i]}});
      }
    std::ofstream(argv[4]) << out.dump();
    return 0;
  }
  if (argc != 3) return 2;
  const json cases = json::parse(std::ifstream(argv[1]));
  json out = json::array();
  for (const auto& c : cases) {
    tensor t = data::read_image(c.at("path").get<std::string>(), c.at("channels").get<int>());
    const std::string aspect = c.value("aspect", "stretch");
    const auto ratio = aspect == "crop" ? data::aspect_ratio::crop : aspect == "pad" ? data::aspect_ratio::pad : data::aspect_ratio::stretch;
    if (!c.at("size").is_null())
      t = data::resize(t, c.at("size")[0].get<std::size_t>(), c.at("size")[1].get<std::size_t>(), data::interpolation::bilinear, ratio);
    out.push_back({{"shape", std::vector<std::size_t>(t.shape().begin(), t.shape().end())},
                   {"values", std::vector<float>(t.begin(), t.end())}});
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "interop_images: %s\n", e.what());
  return 1;
}
