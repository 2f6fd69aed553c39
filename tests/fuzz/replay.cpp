// Without libFuzzer (g++ builds): feeds every file of the folders (or files) named on the command line to
// the harness once, the seed corpus and the inputs of past crashes: the CTest fuzz_replay_* tests.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  int n = 0;
  auto run = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++n;
  };
  for (int i = 1; i < argc; ++i) {
    if (std::filesystem::is_directory(argv[i])) {
      for (const auto& e : std::filesystem::directory_iterator(argv[i]))
        if (e.is_regular_file()) run(e.path());
    } else if (std::filesystem::exists(argv[i])) {
      run(argv[i]);
    }
  }
  std::printf("replayed %d inputs without a crash\n", n);
  return n > 0 ? 0 : 1;
}
