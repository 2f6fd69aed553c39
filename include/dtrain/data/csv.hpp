#pragma once
/// \file
/// CSV files as datasets (`tf.data.experimental.make_csv_dataset`'s role, eagerly): numeric columns,
/// an optional header, one label column; every row becomes an (x, y) element. Bad rows are reported
/// with the file, line and column.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "dtrain/data/sources.hpp"

namespace dtrain::data {

struct csv_options {
  /// The label column, by header name or by index (negative: from the end).
  std::variant<std::string, int> label_column = -1;
  bool header = true;
  char delimiter = ',';
};

/// Reads a CSV file of numbers into (features (n, columns - 1), labels (n,)).
inline example read_csv(const std::filesystem::path& path, const csv_options& o = {}) {
  std::ifstream in(path);
  if (!in) throw io_error(path.string() + ": cannot open");
  const std::string f = path.string();
  auto split = [&](const std::string& line) {
    std::vector<std::string> out;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, o.delimiter)) out.push_back(cell);
    if (!line.empty() && line.back() == o.delimiter) out.emplace_back();
    return out;
  };
  std::string line;
  std::vector<std::string> names;
  std::size_t lineno = 0, columns = 0;
  if (o.header) {
    if (!std::getline(in, line)) throw io_error(f + ": empty file (a header was expected)");
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names = split(line);
    columns = names.size();
  }
  std::vector<std::vector<float>> rows;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto cells = split(line);
    if (columns == 0) columns = cells.size();
    if (cells.size() != columns)
      throw io_error(f + ":" + std::to_string(lineno) + ": " + std::to_string(cells.size()) + " fields, expected " +
                     std::to_string(columns));
    std::vector<float> r(columns);
    for (std::size_t c = 0; c < columns; ++c) {
      const std::string& s = cells[c];
      char* end = nullptr;
      r[c] = std::strtof(s.c_str(), &end);
      if (s.empty() || *end != '\0')
        throw io_error(f + ":" + std::to_string(lineno) + ": column " +
                       (names.empty() ? std::to_string(c) : "'" + names[c] + "'") + " holds \"" + s + "\", not a number");
    }
    rows.push_back(std::move(r));
  }
  if (rows.empty()) throw io_error(f + ": no data rows");
  if (columns < 2) throw io_error(f + ": needs at least one feature column and a label column");
  std::size_t label = 0;
  if (const auto* name = std::get_if<std::string>(&o.label_column)) {
    const auto it = std::find(names.begin(), names.end(), *name);
    if (it == names.end()) throw io_error(f + ": no column named '" + *name + "' in the header");
    label = std::size_t(it - names.begin());
  } else {
    const int i = std::get<int>(o.label_column);
    if (i >= int(columns) || i < -int(columns))
      throw io_error(f + ": label column " + std::to_string(i) + " is out of range for " + std::to_string(columns) + " columns");
    label = std::size_t(i < 0 ? int(columns) + i : i);
  }
  tensor x = zeros({rows.size(), columns - 1}), y = zeros({rows.size()});
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0, k = 0; c < columns; ++c)
      if (c == label) y(r) = rows[r][c];
      else x(r, k++) = rows[r][c];
  return {std::move(x), std::move(y)};
}

/// A dataset of a CSV file's rows: element (features (columns - 1,), label ()).
inline tensor_slices<example> csv_dataset(const std::filesystem::path& path, const csv_options& o = {}) {
  auto [x, y] = read_csv(path, o);
  return from_tensor_slices(std::move(x), std::move(y));
}

}  // namespace dtrain::data
