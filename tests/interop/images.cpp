// dtrain's image decoders and resize on files a Python check writes with Pillow
// (tests/interop/check_images.py). Reads cases as JSON, each
//   {"path": <a PNG or JPEG file>, "channels": 0, 1, 2, 3 or 4, "size": [height, width] or null,
//    "aspect": "stretch" (or absent), "crop" or "pad"}
//   -> {"shape": the decoded (and resized) image's shape, "values": its values}.
// usage: interop_images <cases.json> <out.json>
#include <fstream>

#include <nlohmann/json.hpp>

#include <dtrain/data/image.hpp>

using namespace dtrain;
using json = nlohmann::json;

int main(int argc, char** argv) try {
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
