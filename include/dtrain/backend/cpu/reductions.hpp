#pragma once
/// \file
/// The cpu backend's column sums and element-wise passes, spread over the thread budget. A column sum runs
/// in a fixed number of slices of the rows (from the shape alone), so it is the same for any thread count.

#include <algorithm>
#include <cstddef>
#include <vector>

#include "dtrain/core/threads.hpp"

namespace dtrain::detail {

/// Floats of input per slice of a column sum (at most `max_column_slices` slices), and per part of an
/// element-wise pass: less is not worth a thread.
inline constexpr std::size_t column_slice_floats = 16384;
inline constexpr std::size_t max_column_slices = 16;
inline constexpr std::size_t elementwise_grain = 16384;

/// The slices a column sum over rows x cols values runs in.
inline std::size_t column_slices(std::size_t rows, std::size_t cols) {
  return std::max<std::size_t>(1, std::min({rows * cols / column_slice_floats, max_column_slices, rows}));
}

/// out[0..width) = the sums over rows r < rows of what `add_row(r, acc)` adds into acc[0..width): each slice
/// of the rows row after row from zero, the slices (column_slices(rows, cols)) on the thread budget, then
/// added in order. `cols` is a row's values, for the slice count.
template <class AddRow>
void sum_rows(std::size_t rows, std::size_t cols, std::size_t width, float* out, AddRow&& add_row) {
  const std::size_t slices = column_slices(rows, cols), per = (rows + slices - 1) / slices;
  thread_local std::vector<float> scratch;  // the slices' sums, grown once (a training step allocates nothing)
  if (slices > 1 && scratch.size() < slices * width) scratch.resize(slices * width);
  float* parts = scratch.data();
  parallel_for(
      slices, 1,
      [&](std::size_t first, std::size_t last) {
        for (std::size_t s = first; s < last; ++s) {
          float* acc = slices > 1 ? parts + s * width : out;
          std::fill_n(acc, width, 0.0f);
          for (std::size_t r = s * per; r < std::min(rows, (s + 1) * per); ++r) add_row(r, acc);
        }
      },
      1);
  if (slices == 1) return;
  std::copy_n(parts, width, out);
  for (std::size_t s = 1; s < slices; ++s)
    for (std::size_t j = 0; j < width; ++j) out[j] += parts[s * width + j];
}

/// y (cols) = the sums of the rows of x (rows x cols), by sum_rows.
inline void column_sums(std::size_t rows, std::size_t cols, const float* x, float* y) {
  sum_rows(rows, cols, cols, y, [&](std::size_t r, float* acc) {
    const float* xr = x + r * cols;
    for (std::size_t j = 0; j < cols; ++j) acc[j] += xr[j];
  });
}

/// f(r0, r1) on blocks of rows (each `cols` values) covering [0, rows), over the thread budget; f must
/// write each row alone, the same however the rows are split.
template <class F>
void for_rows(std::size_t rows, std::size_t cols, F&& f) {
  parallel_for(rows, std::max<std::size_t>(1, elementwise_grain / std::max<std::size_t>(cols, 1)), f, 1);
}

}  // namespace dtrain::detail
