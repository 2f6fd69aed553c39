#pragma once
/// \file
/// NumPy files: `.npy` (format versions 1-3, C order, little-endian numbers converted to float) and
/// `.npz` archives (numpy.savez: stored entries; numpy.savez_compressed: deflated), read and written.
/// The zip container is core/zip.hpp's (zip64, which numpy writes only for arrays over 4 GiB, is
/// refused: dtrain does not hold such an array in memory as one float tensor anyway). Writes are atomic
/// (a temporary file in the same folder, fsync, rename), because checkpoints export weights as .npz and
/// a crash must not leave half a file.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/core/file_io.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/zip.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain::data {

namespace detail {

using dtrain::detail::le;
using dtrain::detail::put_le;

/// What a .npy header says: numpy writes a Python dict literal,
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, padded with spaces and a newline.
struct npy_header {
  std::string descr;
  bool fortran_order = false;
  extents shape;
};

/// Parses the header dict strictly (the three keys, once each), so a damaged header is reported
/// rather than half-read.
inline npy_header parse_npy_header(std::string_view h, const std::string& what) {
  std::size_t i = 0;
  auto bad = [&](const std::string& why) {
    return io_error(what + ": malformed .npy header (" + why + "): " + std::string(h.substr(0, 200)));
  };
  auto ws = [&] {
    while (i < h.size() && (h[i] == ' ' || h[i] == '\t' || h[i] == '\n' || h[i] == '\r')) ++i;
  };
  auto eat = [&](char c) {
    ws();
    if (i < h.size() && h[i] == c) return ++i, true;
    return false;
  };
  auto quoted = [&] {
    ws();
    if (i >= h.size() || (h[i] != '\'' && h[i] != '"')) throw bad("expected a quoted string");
    const char q = h[i++];
    const auto end = h.find(q, i);
    if (end == std::string_view::npos) throw bad("unterminated string");
    std::string s(h.substr(i, end - i));
    i = end + 1;
    return s;
  };
  auto dimension = [&] {
    ws();
    const std::size_t from = i;
    std::size_t v = 0;
    for (; i < h.size() && h[i] >= '0' && h[i] <= '9'; ++i) {
      if (v > (std::numeric_limits<std::size_t>::max() - 9) / 10) throw bad("a dimension is too large");
      v = v * 10 + std::size_t(h[i] - '0');
    }
    if (i == from) throw bad("expected a non-negative integer in the shape");
    if (i < h.size() && h[i] == 'L') ++i;  // Python 2 wrote long integers as 3L
    return v;
  };
  npy_header out;
  bool seen_descr = false, seen_order = false, seen_shape = false;
  if (!eat('{')) throw bad("expected '{'");
  while (!eat('}')) {
    const std::string key = quoted();
    if (!eat(':')) throw bad("expected ':' after '" + key + "'");
    ws();
    if (key == "descr" && !seen_descr) {
      if (i < h.size() && h[i] == '[')
        throw io_error(what + ": structured dtypes (record arrays) are not supported; save a plain numeric array");
      out.descr = quoted();
      seen_descr = true;
    } else if (key == "fortran_order" && !seen_order) {
      if (h.substr(i, 4) == "True")
        out.fortran_order = true, i += 4;
      else if (h.substr(i, 5) == "False")
        i += 5;
      else
        throw bad("fortran_order must be True or False");
      seen_order = true;
    } else if (key == "shape" && !seen_shape) {
      if (!eat('(')) throw bad("shape must be a tuple");
      while (!eat(')')) {
        out.shape.push_back(dimension());
        if (!eat(',')) {
          if (!eat(')')) throw bad("expected ',' or ')' in the shape");
          break;
        }
      }
      seen_shape = true;
    } else {
      throw bad("unexpected or repeated key '" + key + "'");
    }
    if (!eat(',')) {
      if (!eat('}')) throw bad("expected ',' or '}'");
      break;
    }
  }
  ws();
  if (i != h.size()) throw bad("characters after the closing '}'");
  if (!seen_descr || !seen_order || !seen_shape) throw bad("it needs 'descr', 'fortran_order' and 'shape'");
  return out;
}

/// The dtypes dtrain converts to float: every little-endian number type (one-byte ones have no order).
inline std::size_t npy_width(const std::string& descr, const std::string& what) {
  for (const char* d : {"<f4", "<f8", "<i1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "|b1"})
    if (descr == d) return std::size_t(descr[2] - '0');
  const std::string hint =
      !descr.empty() && descr[0] == '>' ? " (big-endian: save arr.astype(arr.dtype.newbyteorder('<')) instead)" : "";
  throw io_error(what + ": unsupported dtype '" + descr + "'" + hint +
                 "; readable: <f4 <f8 |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8 |b1");
}

/// Parses one .npy image (a whole file, or an .npz entry) named `what` in messages.
inline tensor parse_npy(const char* b, std::size_t size, const std::string& what) {
  if (size < 8 || std::memcmp(b, "\x93NUMPY", 6) != 0)
    throw io_error(what + ": bad .npy magic (not a NumPy .npy file)");
  const int major = static_cast<unsigned char>(b[6]), minor = static_cast<unsigned char>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    throw io_error(what + ": unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (1.0, 2.0 and 3.0 are read)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) throw io_error(what + ": truncated .npy header (file of " + std::to_string(size) + " bytes)");
  const std::size_t header_len = le(b + 8, int(len_bytes)), start = 8 + len_bytes + header_len;
  if (start > size)
    throw io_error(what + ": truncated .npy header (it claims " + std::to_string(header_len) + " bytes, the file has " +
                   std::to_string(size - 8 - len_bytes) + " after the length field)");
  const npy_header h = parse_npy_header(std::string_view(b + 8 + len_bytes, header_len), what);
  const std::size_t width = npy_width(h.descr, what);
  if (h.fortran_order)
    throw io_error(what + ": Fortran-ordered arrays are not supported (save np.ascontiguousarray(a) instead)");
  std::size_t count = 1;
  for (const std::size_t d : h.shape) {
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / d / width)
      throw io_error(what + ": the header's shape " + shape_str(h.shape) + " is too large");
    count *= d;
  }
  const std::size_t need = count * width, have = size - start;
  if (have != need)
    throw io_error(what + (have < need ? ": truncated: " : ": wrong data length: ") + "shape " + shape_str(h.shape) +
                   " of '" + h.descr + "' needs " + std::to_string(need) + " bytes of data, the file has " +
                   std::to_string(have));
  tensor t = zeros(h.shape);
  const char* d = b + start;
  float* o = t.data();
  const char kind = h.descr[1];
  if (kind == 'f' && width == 4 && std::endian::native == std::endian::little) {
    if (need != 0) std::memcpy(o, d, need);  // an empty array's data() may be null: no memcpy from or to it
    return t;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t u = le(d + i * width, int(width));
    switch (kind) {
      case 'f': o[i] = width == 4 ? std::bit_cast<float>(std::uint32_t(u)) : float(std::bit_cast<double>(u)); break;
      case 'b': o[i] = u != 0 ? 1.0f : 0.0f; break;
      case 'u': o[i] = float(u); break;
      default: {  // signed: sign-extend from the top bit of the stored width
        const int shift = 64 - int(width) * 8;
        o[i] = float(static_cast<std::int64_t>(u << shift) >> shift);
      }
    }
  }
  return t;
}

/// A float tensor as a .npy image: '<f4', C order, version 1.0 (2.0 only for a header over 64 KiB),
/// the header padded so the data starts 64-byte aligned, as numpy does.
inline std::string npy_image(const tensor& t) {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_str(t.shape()) + ", }";
  const bool v2 = 10 + h.size() + 64 > 0xffff;  // padding adds up to 63 bytes
  const std::size_t prefix = v2 ? 12 : 10;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(v2 ? 2 : 1), out += '\0';
  put_le(out, h.size(), v2 ? 4 : 2);
  out += h;
  const std::size_t n = t.size();
  if constexpr (std::endian::native == std::endian::little) {
    out.append(reinterpret_cast<const char*>(t.data()), n * sizeof(float));
  } else {
    out.reserve(out.size() + 4 * n);
    for (std::size_t i = 0; i < n; ++i) put_le(out, std::bit_cast<std::uint32_t>(t.data()[i]), 4);
  }
  return out;
}

}  // namespace detail

/// Reads a .npy file as a float tensor of its shape (`numpy.load(path)` converted to float32).
inline tensor read_npy(const std::filesystem::path& path) {
  const auto b = dtrain::detail::read_file(path);
  return detail::parse_npy(b.data(), b.size(), path.string());
}

/// Writes a float tensor as a .npy file ('<f4', C order), atomically.
inline void write_npy(const std::filesystem::path& path, const tensor& t) {
  const std::string image = detail::npy_image(t);
  dtrain::detail::write_file_atomic(path, image);
}

/// Reads every array of a .npz archive; keys are the entry names without ".npy" (as `numpy.load`).
inline std::map<std::string, tensor> read_npz(const std::filesystem::path& path) {
  const auto b = dtrain::detail::read_file(path);
  const std::string f = path.string();
  const dtrain::detail::zip_view zip(b, f);
  std::map<std::string, tensor> out;
  for (const auto& e : zip.entries()) {
    const std::string raw = zip.read(e);
    std::string key = e.name.ends_with(".npy") ? e.name.substr(0, e.name.size() - 4) : e.name;
    if (out.count(key)) throw io_error(f + ": the archive holds '" + key + "' twice");
    out.emplace(std::move(key), detail::parse_npy(raw.data(), raw.size(), f + ":" + e.name));
  }
  return out;
}

/// Writes arrays as an uncompressed .npz archive (what numpy.savez writes: entries "<key>.npy" holding
/// '<f4' arrays), atomically. `numpy.load(path)[key]` reads them back.
inline void write_npz(const std::filesystem::path& path, const std::map<std::string, tensor>& arrays) {
  std::vector<std::string> images;  // (reserved: the entries' views stay valid)
  images.reserve(arrays.size());
  std::vector<std::pair<std::string, std::string_view>> entries;
  for (const auto& [key, t] : arrays) {
    if (key.empty()) throw value_error(path.string() + ": an array needs a non-empty name");
    entries.emplace_back(key + ".npy", images.emplace_back(detail::npy_image(t)));
  }
  dtrain::detail::write_file_atomic(path, dtrain::detail::zip_archive(entries, path.string()));
}

/// `from_tensor_slices((x, y))` over features and labels stored in two .npy files.
inline tensor_slices<example> from_npy(const std::filesystem::path& x, const std::filesystem::path& y) {
  return from_tensor_slices(read_npy(x), read_npy(y));
}

/// `from_tensor_slices((x, y))` over two arrays of a .npz archive (numpy.savez(path, x=..., y=...)).
inline tensor_slices<example> from_npz(const std::filesystem::path& path, const std::string& x = "x",
                                       const std::string& y = "y") {
  auto arrays = read_npz(path);
  for (const std::string* k : {&x, &y})
    if (!arrays.count(*k)) {
      std::string held;
      for (const auto& [name, t] : arrays) held += (held.empty() ? "" : ", ") + name;
      throw io_error(path.string() + ": no array named '" + *k + "' in the archive (it holds: " +
                     (held.empty() ? "nothing" : held) + ")");
    }
  return from_tensor_slices(std::move(arrays[x]), std::move(arrays[y]));
}

}  // namespace dtrain::data
