#pragma once
/// \file
/// CSV files as datasets (`tf.data.experimental.make_csv_dataset`'s role): numeric columns, an optional
/// header, one label column; every row becomes an (x, y) element. The file is read whole when the
/// dataset is made, so a bad row fails at once (naming the file, line and column) rather than epochs
/// into training, and the dataset is then a `from_tensor_slices` whose state is just its position.
/// Fields may be quoted ("1.5", with "" for a quote) and are trimmed of spaces; numbers are parsed with
/// std::from_chars, so the result does not depend on the process locale.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include "dtrain/data/sources.hpp"

namespace dtrain::data {

struct csv_options {
  /// The label column, by header name or by index (negative: from the end; the default is the last).
  std::variant<std::string, int> label_column = -1;
  /// Whether the first line names the columns.
  bool header = true;
  char delimiter = ',';
};

namespace detail {

inline std::string_view trim_csv(std::string_view s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

/// Splits one line into fields (RFC 4180 quoting within the line; quoted line breaks are not supported).
/// Returns false on an unterminated quote.
inline bool split_csv(std::string_view line, char delim, std::vector<std::string>& out) {
  out.clear();
  std::size_t i = 0;
  for (;;) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t') && line[i] != delim) ++i;
    std::string cell;
    if (i < line.size() && line[i] == '"') {
      ++i;
      for (;;) {
        if (i >= line.size()) return false;
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell += '"', i += 2;
            continue;
          }
          ++i;
          break;
        }
        cell += line[i++];
      }
      const auto end = line.find(delim, i);
      cell += std::string(trim_csv(line.substr(i, end == std::string_view::npos ? end : end - i)));
      i = end;
    } else {
      const auto end = line.find(delim, i);
      cell = std::string(trim_csv(line.substr(i, end == std::string_view::npos ? end : end - i)));
      i = end;
    }
    out.push_back(std::move(cell));
    if (i == std::string_view::npos) return true;
    ++i;  // past the delimiter: another field follows, possibly empty
  }
}

/// Parses a whole field as a float ("+1", "1e-3", "nan", "inf" included); false if it is not one.
inline bool parse_csv_number(const std::string& s, float& v) {
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  if (b == e) return false;
  const auto [p, ec] = std::from_chars(b, e, v);
  return ec == std::errc{} && p == e;
}

}  // namespace detail

/// Reads a CSV file of numbers into (features (rows, columns - 1), labels (rows,)). Blank lines are
/// skipped; every other line must have as many fields as the header (or the first row).
inline example read_csv(const std::filesystem::path& path, const csv_options& o = {}) {
  const std::string f = path.string();
  if (o.delimiter == '"' || o.delimiter == '\n' || o.delimiter == '\r')
    throw value_error(f + ": the CSV delimiter cannot be a quote or a line break");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(f + ": cannot open (" + std::strerror(errno) + ")");
  std::string line;
  std::vector<std::string> names, cells;
  std::size_t lineno = 0, columns = 0;
  auto next_line = [&] {
    if (!std::getline(in, line)) return false;
    if (++lineno == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // a UTF-8 byte order mark
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  auto split = [&](std::vector<std::string>& out) {
    if (!detail::split_csv(line, o.delimiter, out))
      throw io_error(f + ":" + std::to_string(lineno) + ": unterminated quoted field");
  };
  if (o.header) {
    do {
      if (!next_line()) throw io_error(f + ": empty file (a header line was expected)");
    } while (detail::trim_csv(line).empty());
    split(names);
    columns = names.size();
  }
  std::vector<float> values;  // row-major, `columns` per row
  std::size_t rows = 0;
  while (next_line()) {
    if (detail::trim_csv(line).empty()) continue;
    split(cells);
    if (columns == 0) columns = cells.size();
    if (cells.size() != columns)
      throw io_error(f + ":" + std::to_string(lineno) + ": " + std::to_string(cells.size()) + " fields, expected " +
                     std::to_string(columns) + (o.header ? " (as the header)" : " (as the first row)"));
    for (std::size_t c = 0; c < columns; ++c) {
      float v = 0;
      if (!detail::parse_csv_number(cells[c], v))
        throw io_error(f + ":" + std::to_string(lineno) + ": column " +
                       (names.empty() ? std::to_string(c) : "'" + names[c] + "'") + " holds \"" + cells[c] +
                       "\", not a number");
      values.push_back(v);
    }
    ++rows;
  }
  if (in.bad()) throw io_error(f + ": read failed");
  if (rows == 0) throw io_error(f + ": no data rows");
  if (columns < 2) throw io_error(f + ": needs at least one feature column besides the label column");
  std::size_t label = 0;
  if (const auto* name = std::get_if<std::string>(&o.label_column)) {
    if (names.empty()) throw value_error(f + ": label column '" + *name + "' given by name, but the file has no header");
    const auto n = std::count(names.begin(), names.end(), *name);
    if (n != 1) {
      std::string held;
      for (const auto& s : names) held += (held.empty() ? "'" : ", '") + s + "'";
      throw io_error(f + (n == 0 ? ": no column named '" : ": more than one column named '") + *name +
                     "' in the header (columns: " + held + ")");
    }
    label = std::size_t(std::find(names.begin(), names.end(), *name) - names.begin());
  } else {
    const int i = std::get<int>(o.label_column);
    if (i >= int(columns) || i < -int(columns))
      throw value_error(f + ": label column " + std::to_string(i) + " is out of range for " + std::to_string(columns) +
                        " columns");
    label = std::size_t(i < 0 ? int(columns) + i : i);
  }
  tensor x = zeros({rows, columns - 1}), y = zeros({rows});
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0, k = 0; c < columns; ++c) {
      const float v = values[r * columns + c];
      if (c == label)
        y(r) = v;
      else
        x(r, k++) = v;
    }
  return {std::move(x), std::move(y)};
}

/// A dataset of a CSV file's rows: elements (features of shape (columns - 1,), label of shape ()),
/// in file order; compose with shuffle/batch as any other dataset.
inline tensor_slices<example> csv_dataset(const std::filesystem::path& path, const csv_options& o = {}) {
  auto [x, y] = read_csv(path, o);
  return from_tensor_slices(std::move(x), std::move(y));
}

}  // namespace dtrain::data
