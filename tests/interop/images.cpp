// dtrain's image decoders and resize on files a Python check writes with Pillow
// (tests/interop/check_images.py). Reads cases as JSON, each
//   {"path": <a PNG or JPEG file>, "channels": 0, 1, 2, 3 or 4, "size": [height, width] or null}
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
    if (!c.at("size").is_null()) t = data::resize(t, c.at("size")[0].get<std::size_t>(), c.at("size")[1].get<std::size_t>());
    out.push_back({{"shape", std::vector<std::size_t>(t.shape().begin(), t.shape().end())},
                   {"values", std::vector<float>(t.begin(), t.end())}});
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "interop_images: %s\n", e.what());
  return 1;
}
