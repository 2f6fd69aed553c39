// CSV files: the first byte picks the options (header, delimiter, label column), the rest is the file.
#include <dtrain/data/csv.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  dtrain::data::csv_options o;
  o.header = data[0] & 1;
  o.delimiter = data[0] & 2 ? ';' : ',';
  if (data[0] & 4) o.label_column = std::string("label");
  else o.label_column = int(std::int8_t(data[0]) >> 3);
  const auto& file = dtrain_fuzz::as_file(data + 1, size - 1, ".csv");
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    const auto [x, y] = dtrain::data::read_csv(file, o);
    if (x.dimension() != 2 || y.size() != x.shape()[0]) __builtin_trap();
  });
  return 0;
}
