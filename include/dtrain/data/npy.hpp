#pragma once
/// \file
/// NumPy files: `.npy` (format versions 1-3, C order, little-endian numbers converted to float) and
/// `.npz` archives (numpy.savez: stored entries; numpy.savez_compressed: deflated), read and written.
/// The zip container is parsed here rather than through a zip library: an .npz needs only local headers,
/// the central directory and raw deflate, which zlib (already a dependency) provides, CRC-32 included.
/// zip64 is refused with a clear error: numpy needs it only for arrays over 4 GiB, which dtrain does not
/// hold in memory as one float tensor anyway. Writes are atomic (a temporary file in the same folder,
/// fsync, rename), because checkpoints export weights as .npz and a crash must not leave half a file.

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/core/file_io.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain::data {

namespace detail {

/// The whole file (npy and npz are read in one go: the zip directory sits at the end).
inline std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw io_error(p.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<char> b(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) throw io_error(p.string() + ": read failed");
  return b;
}

/// An unsigned little-endian integer of `n` bytes (byte by byte, so the host's byte order is irrelevant).
inline std::uint64_t le(const char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
inline void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

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
  const auto b = detail::slurp(path);
  return detail::parse_npy(b.data(), b.size(), path.string());
}

/// Writes a float tensor as a .npy file ('<f4', C order), atomically.
inline void write_npy(const std::filesystem::path& path, const tensor& t) {
  const std::string image = detail::npy_image(t);
  dtrain::detail::write_file_atomic(path, image);
}

/// Reads every array of a .npz archive; keys are the entry names without ".npy" (as `numpy.load`).
inline std::map<std::string, tensor> read_npz(const std::filesystem::path& path) {
  const auto b = detail::slurp(path);
  const std::string f = path.string();
  const char* z = b.data();
  // The end-of-central-directory record: 22 bytes, then a comment of up to 64 KiB.
  std::size_t eocd = std::string::npos;
  if (b.size() >= 22)
    for (std::size_t i = b.size() - 22;; --i) {
      if (detail::le(z + i, 4) == 0x06054b50 && i + 22 + detail::le(z + i + 20, 2) <= b.size()) {
        eocd = i;
        break;
      }
      if (i == 0 || b.size() - 22 - i >= 0xffff) break;
    }
  if (eocd == std::string::npos)
    throw io_error(f + ": not a zip archive (no end-of-central-directory record; truncated or not an .npz?)");
  const std::size_t disk = detail::le(z + eocd + 4, 2), cd_disk = detail::le(z + eocd + 6, 2),
                    here = detail::le(z + eocd + 8, 2), entries = detail::le(z + eocd + 10, 2),
                    cd_size = detail::le(z + eocd + 12, 4), cd = detail::le(z + eocd + 16, 4);
  if (entries == 0xffff || cd_size == 0xffffffff || cd == 0xffffffff ||
      (eocd >= 20 && detail::le(z + eocd - 20, 4) == 0x07064b50))
    throw io_error(f + ": zip64 archives are not supported (numpy writes them for arrays over 4 GiB)");
  if (disk != 0 || cd_disk != 0 || here != entries) throw io_error(f + ": multi-volume zip archives are not supported");
  if (cd > eocd || cd_size > eocd - cd)
    throw io_error(f + ": corrupt zip: the central directory lies outside the file (truncated?)");
  std::map<std::string, tensor> out;
  std::size_t at = cd;
  for (std::size_t k = 0; k < entries; ++k) {
    if (at + 46 > cd + cd_size || detail::le(z + at, 4) != 0x02014b50)
      throw io_error(f + ": corrupt zip central directory (entry " + std::to_string(k) + ")");
    const char* c = z + at;
    const std::size_t flags = detail::le(c + 8, 2), method = detail::le(c + 10, 2), csize = detail::le(c + 20, 4),
                      usize = detail::le(c + 24, 4), nlen = detail::le(c + 28, 2), xlen = detail::le(c + 30, 2),
                      clen = detail::le(c + 32, 2), local = detail::le(c + 42, 4);
    const auto crc = static_cast<std::uint32_t>(detail::le(c + 16, 4));
    if (at + 46 + nlen + xlen + clen > cd + cd_size)
      throw io_error(f + ": corrupt zip central directory (entry " + std::to_string(k) + ")");
    std::string name(c + 46, nlen);
    at += 46 + nlen + xlen + clen;
    if (name.empty()) throw io_error(f + ": corrupt zip: entry " + std::to_string(k) + " has an empty name");
    if (name.back() == '/') continue;  // a folder
    if (csize == 0xffffffff || usize == 0xffffffff || local == 0xffffffff)
      throw io_error(f + ": entry '" + name + "' is zip64, which is not supported (arrays over 4 GiB)");
    if (flags & 1) throw io_error(f + ": entry '" + name + "' is encrypted");
    if (local > cd || cd - local < 30 || detail::le(z + local, 4) != 0x04034b50)
      throw io_error(f + ": corrupt zip: no local header for entry '" + name + "'");
    const std::size_t data = local + 30 + detail::le(z + local + 26, 2) + detail::le(z + local + 28, 2);
    if (data > cd || csize > cd - data)
      throw io_error(f + ": truncated: entry '" + name + "' (" + std::to_string(csize) +
                     " bytes) runs past the end of its data");
    // the sizes are claims of the file: they are checked against what its bytes can hold before
    // anything is allocated (deflate expands at most 1032:1)
    std::string raw;
    if (method == 0) {
      if (csize != usize)
        throw io_error(f + ": corrupt stored entry '" + name + "' (sizes " + std::to_string(csize) + " and " +
                       std::to_string(usize) + " differ)");
      raw.assign(z + data, usize);
    } else if (method == 8) {
      if (usize > csize * 1032 + 64)
        throw io_error(f + ": corrupt compressed entry '" + name + "': " + std::to_string(csize) +
                       " bytes cannot inflate to the " + std::to_string(usize) + " bytes the archive records");
      raw.assign(usize, '\0');
      z_stream s{};
      if (inflateInit2(&s, -MAX_WBITS) != Z_OK) throw io_error(f + ": zlib cannot start inflating '" + name + "'");
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(z + data));
      s.avail_in = static_cast<uInt>(csize);
      s.next_out = reinterpret_cast<Bytef*>(raw.data());
      s.avail_out = static_cast<uInt>(usize);
      const int r = inflate(&s, Z_FINISH);
      const std::string why = s.msg ? s.msg : "the data does not inflate to the recorded size";
      const auto produced = s.total_out;
      inflateEnd(&s);
      if (r != Z_STREAM_END || produced != usize)
        throw io_error(f + ": corrupt compressed entry '" + name + "' (" + why + ")");
    } else {
      throw io_error(f + ": entry '" + name + "' uses zip compression method " + std::to_string(method) +
                     " (only stored and deflate are read)");
    }
    if (dtrain::detail::crc32_of(raw.data(), raw.size()) != crc)
      throw io_error(f + ": CRC mismatch in entry '" + name + "' (the archive is damaged)");
    std::string key = name.ends_with(".npy") ? name.substr(0, name.size() - 4) : name;
    if (out.count(key)) throw io_error(f + ": the archive holds '" + name + "' twice");
    out.emplace(std::move(key), detail::parse_npy(raw.data(), raw.size(), f + ":" + name));
  }
  return out;
}

/// Writes arrays as an uncompressed .npz archive (what numpy.savez writes: entries "<key>.npy" holding
/// '<f4' arrays), atomically. `numpy.load(path)[key]` reads them back.
inline void write_npz(const std::filesystem::path& path, const std::map<std::string, tensor>& arrays) {
  const std::string f = path.string();
  if (arrays.size() >= 0xffff) throw io_error(f + ": " + std::to_string(arrays.size()) + " arrays need zip64");
  constexpr std::uint64_t dos_date = (0u << 9) | (1u << 5) | 1u;  // 1980-01-01, the earliest zip date
  std::string out, cd;
  for (const auto& [key, t] : arrays) {
    if (key.empty()) throw value_error(f + ": an array needs a non-empty name");
    const std::string name = key + ".npy", img = detail::npy_image(t);
    if (name.size() > 0xffff) throw value_error(f + ": array name '" + key.substr(0, 40) + "...' is too long");
    if (img.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      throw io_error(f + ": array '" + key + "' would need zip64 (over 4 GiB)");
    const bool utf8 = std::any_of(name.begin(), name.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; });
    const std::uint64_t flags = utf8 ? 1u << 11 : 0u, crc = dtrain::detail::crc32_of(img.data(), img.size());
    const std::size_t local = out.size();
    detail::put_le(out, 0x04034b50, 4), detail::put_le(out, 20, 2), detail::put_le(out, flags, 2);
    detail::put_le(out, 0, 2), detail::put_le(out, 0, 2), detail::put_le(out, dos_date, 2);
    detail::put_le(out, crc, 4), detail::put_le(out, img.size(), 4), detail::put_le(out, img.size(), 4);
    detail::put_le(out, name.size(), 2), detail::put_le(out, 0, 2);
    out += name;
    out += img;
    detail::put_le(cd, 0x02014b50, 4), detail::put_le(cd, (3 << 8) | 20, 2), detail::put_le(cd, 20, 2);
    detail::put_le(cd, flags, 2), detail::put_le(cd, 0, 2), detail::put_le(cd, 0, 2), detail::put_le(cd, dos_date, 2);
    detail::put_le(cd, crc, 4), detail::put_le(cd, img.size(), 4), detail::put_le(cd, img.size(), 4);
    detail::put_le(cd, name.size(), 2), detail::put_le(cd, 0, 2), detail::put_le(cd, 0, 2);
    detail::put_le(cd, 0, 2), detail::put_le(cd, 0, 2), detail::put_le(cd, std::uint64_t(0100644) << 16, 4);
    detail::put_le(cd, local, 4);
    cd += name;
  }
  if (out.size() + cd.size() >= 0xffffffffu) throw io_error(f + ": the archive would need zip64 (over 4 GiB)");
  const std::size_t cd_at = out.size();
  out += cd;
  detail::put_le(out, 0x06054b50, 4), detail::put_le(out, 0, 2), detail::put_le(out, 0, 2);
  detail::put_le(out, arrays.size(), 2), detail::put_le(out, arrays.size(), 2);
  detail::put_le(out, cd.size(), 4), detail::put_le(out, cd_at, 4), detail::put_le(out, 0, 2);
  dtrain::detail::write_file_atomic(path, out);
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
