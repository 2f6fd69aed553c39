#pragma once
/// \file
/// NumPy files: `.npy` (format versions 1-3, C order, little-endian numbers converted to float) and
/// `.npz` archives (numpy.savez, stored; numpy.savez_compressed, deflated), read and written. The zip
/// container is parsed here (local headers, central directory, CRC-32 checked with zlib); zip64 is not
/// needed for the sizes dtrain writes and is refused clearly when met.

#include <zlib.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dtrain/core/tensor.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain::data {

namespace detail {

inline std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw io_error(p.string() + ": cannot open");
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

inline std::uint64_t le(const char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

/// Parses one .npy image (whole file contents) named `what` for messages.
inline tensor parse_npy(const char* b, std::size_t size, const std::string& what) {
  static const char magic[] = "\x93NUMPY";
  if (size < 10 || std::memcmp(b, magic, 6) != 0) throw io_error(what + ": bad .npy magic (not a NumPy file)");
  const int major = static_cast<unsigned char>(b[6]);
  if (major < 1 || major > 3) throw io_error(what + ": unsupported .npy version " + std::to_string(major));
  const std::size_t hl_size = major == 1 ? 2 : 4;
  if (size < 8 + hl_size) throw io_error(what + ": truncated .npy header");
  const std::size_t hl = le(b + 8, int(hl_size)), start = 8 + hl_size + hl;
  if (start > size) throw io_error(what + ": truncated .npy header (" + std::to_string(hl) + " bytes promised)");
  const std::string h(b + 8 + hl_size, hl);
  auto field = [&](const std::string& key) {
    const auto k = h.find("'" + key + "'");
    if (k == std::string::npos) throw io_error(what + ": .npy header lacks '" + key + "': " + h);
    return h.substr(h.find(':', k) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw io_error(what + ": Fortran-ordered arrays are not supported (save with np.ascontiguousarray)");
  std::string shp = field("shape");
  shp = shp.substr(shp.find('(') + 1, shp.find(')') - shp.find('(') - 1);
  extents e;
  std::size_t count = 1;
  for (std::size_t i = 0; i < shp.size();) {
    const auto j = shp.find(',', i);
    std::string d = shp.substr(i, j == std::string::npos ? std::string::npos : j - i);
    d.erase(0, d.find_first_not_of(' '));
    d.erase(d.find_last_not_of(' ') + 1);
    if (!d.empty()) {
      if (d.find_first_not_of("0123456789") != std::string::npos) throw io_error(what + ": bad shape in .npy header: " + h);
      e.push_back(std::stoull(d));
      count *= e.back();
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|'))
    throw io_error(what + ": unsupported dtype '" + descr + "' (little-endian numbers only)");
  const char kind = descr[1];
  const std::size_t width = std::stoul(descr.substr(2));
  const bool ok = (kind == 'f' && (width == 4 || width == 8)) || ((kind == 'i' || kind == 'u') && (width == 1 || width == 2 || width == 4 || width == 8)) ||
                  (kind == 'b' && width == 1);
  if (!ok) throw io_error(what + ": unsupported dtype '" + descr + "'");
  if (size - start < count * width)
    throw io_error(what + ": truncated: shape " + shape_str(e) + " of '" + descr + "' needs " + std::to_string(count * width) +
                   " bytes, the file has " + std::to_string(size - start));
  tensor t = zeros(e);
  const char* d = b + start;
  float* o = t.data();
  for (std::size_t i = 0; i < count; ++i) {
    const char* p = d + i * width;
    const std::uint64_t u = le(p, int(width));
    switch (kind) {
      case 'f': o[i] = width == 4 ? std::bit_cast<float>(std::uint32_t(u)) : float(std::bit_cast<double>(u)); break;
      case 'u': case 'b': o[i] = float(u); break;
      default: {  // signed: sign-extend
        const int shift = 64 - int(width) * 8;
        o[i] = float(static_cast<std::int64_t>(u << shift) >> shift);
      }
    }
  }
  return t;
}

inline std::string npy_image(const tensor& t) {
  std::string shape = "(";
  for (std::size_t i = 0; i < t.dimension(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  shape += t.dimension() == 1 ? ",)" : ")";
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(h.size() & 0xff), out += char(h.size() >> 8);
  out += h;
  out.append(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  return out;
}

inline void write_atomic(const std::filesystem::path& p, const std::string& bytes) {
  const auto tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.write(bytes.data(), std::streamsize(bytes.size())) || !out.flush())
      throw io_error(p.string() + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, p, ec);
  if (ec) throw io_error(p.string() + ": cannot rename the written file into place (" + ec.message() + ")");
}

}  // namespace detail

/// Reads a .npy file as a float tensor of its shape.
inline tensor read_npy(const std::filesystem::path& path) {
  const auto b = detail::slurp(path);
  return detail::parse_npy(b.data(), b.size(), path.string());
}

/// Writes a float tensor as a .npy file ('<f4', C order), atomically.
inline void write_npy(const std::filesystem::path& path, const tensor& t) { detail::write_atomic(path, detail::npy_image(t)); }

/// Reads every array of a .npz archive; keys are the entry names without ".npy".
inline std::map<std::string, tensor> read_npz(const std::filesystem::path& path) {
  const auto b = detail::slurp(path);
  const std::string f = path.string();
  // the end-of-central-directory record, scanning back over a possible comment
  std::size_t eocd = std::string::npos;
  for (std::size_t i = b.size() >= 22 ? b.size() - 22 : std::string::npos; i != std::string::npos && i + 65558 >= b.size(); --i) {
    if (detail::le(b.data() + i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == 0) break;
  }
  if (eocd == std::string::npos) throw io_error(f + ": not a zip archive (no end of central directory; truncated?)");
  const std::size_t entries = detail::le(b.data() + eocd + 10, 2), cd = detail::le(b.data() + eocd + 16, 4);
  if (entries == 0xffff || cd == 0xffffffff) throw io_error(f + ": zip64 archives are not supported");
  std::map<std::string, tensor> out;
  std::size_t at = cd;
  for (std::size_t k = 0; k < entries; ++k) {
    if (at + 46 > b.size() || detail::le(b.data() + at, 4) != 0x02014b50) throw io_error(f + ": corrupt zip central directory");
    const char* c = b.data() + at;
    const int method = int(detail::le(c + 10, 2));
    const std::uint32_t crc = std::uint32_t(detail::le(c + 16, 4));
    const std::size_t csize = detail::le(c + 20, 4), usize = detail::le(c + 24, 4), nlen = detail::le(c + 28, 2),
                      xlen = detail::le(c + 30, 2), clen = detail::le(c + 32, 2), local = detail::le(c + 42, 4);
    if (at + 46 + nlen > b.size()) throw io_error(f + ": corrupt zip central directory");
    std::string name(c + 46, nlen);
    at += 46 + nlen + xlen + clen;
    if (csize == 0xffffffff || usize == 0xffffffff || local == 0xffffffff) throw io_error(f + ": zip64 entries are not supported");
    if (local + 30 > b.size() || detail::le(b.data() + local, 4) != 0x04034b50) throw io_error(f + ": corrupt zip entry '" + name + "'");
    const std::size_t data = local + 30 + detail::le(b.data() + local + 26, 2) + detail::le(b.data() + local + 28, 2);
    if (data + csize > b.size()) throw io_error(f + ": truncated: entry '" + name + "' runs past the end of the file");
    std::string raw(usize, '\0');
    if (method == 0) {
      if (csize != usize) throw io_error(f + ": corrupt stored entry '" + name + "'");
      std::memcpy(raw.data(), b.data() + data, usize);
    } else if (method == 8) {
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw io_error(f + ": zlib cannot inflate");
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + data));
      z.avail_in = uInt(csize);
      z.next_out = reinterpret_cast<Bytef*>(raw.data());
      z.avail_out = uInt(usize);
      const int r = inflate(&z, Z_FINISH);
      inflateEnd(&z);
      if (r != Z_STREAM_END || z.total_out != usize) throw io_error(f + ": corrupt compressed entry '" + name + "'");
    } else {
      throw io_error(f + ": entry '" + name + "' uses zip method " + std::to_string(method) + " (only stored and deflate)");
    }
    if (crc32(0, reinterpret_cast<const Bytef*>(raw.data()), uInt(raw.size())) != crc)
      throw io_error(f + ": CRC mismatch in entry '" + name + "' (the archive is damaged)");
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") name.resize(name.size() - 4);
    out[name] = detail::parse_npy(raw.data(), raw.size(), f + ":" + name);
  }
  return out;
}

/// Writes arrays as an uncompressed .npz archive (what numpy.savez writes), atomically.
inline void write_npz(const std::filesystem::path& path, const std::map<std::string, tensor>& arrays) {
  std::string out, cd;
  auto put = [](std::string& s, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += char((v >> (8 * i)) & 0xff);
  };
  for (const auto& [key, t] : arrays) {
    const std::string name = key + ".npy", img = detail::npy_image(t);
    if (img.size() >= 0xffffffffu || out.size() >= 0xffffffffu) throw io_error(path.string() + ": too large for a non-zip64 archive");
    const std::uint32_t crc = std::uint32_t(crc32(0, reinterpret_cast<const Bytef*>(img.data()), uInt(img.size())));
    const std::size_t local = out.size();
    put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, crc, 4);
    put(out, img.size(), 4), put(out, img.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
    out += name;
    out += img;
    put(cd, 0x02014b50, 4), put(cd, 20, 2), put(cd, 20, 2), put(cd, 0, 2), put(cd, 0, 2), put(cd, 0, 4), put(cd, crc, 4);
    put(cd, img.size(), 4), put(cd, img.size(), 4), put(cd, name.size(), 2), put(cd, 0, 2), put(cd, 0, 2), put(cd, 0, 2);
    put(cd, 0, 2), put(cd, 0, 4), put(cd, local, 4);
    cd += name;
  }
  const std::size_t cd_at = out.size();
  out += cd;
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, arrays.size(), 2), put(out, arrays.size(), 2);
  put(out, cd.size(), 4), put(out, cd_at, 4), put(out, 0, 2);
  detail::write_atomic(path, out);
}

/// `from_tensor_slices` over features and labels stored in .npy files.
inline tensor_slices<example> from_npy(const std::filesystem::path& x, const std::filesystem::path& y) {
  return from_tensor_slices(read_npy(x), read_npy(y));
}
/// `from_tensor_slices` over two arrays of a .npz archive.
inline tensor_slices<example> from_npz(const std::filesystem::path& path, const std::string& x = "x",
                                       const std::string& y = "y") {
  auto arrays = read_npz(path);
  for (const auto* k : {&x, &y})
    if (!arrays.count(*k)) throw io_error(path.string() + ": no array named '" + *k + "' in the archive");
  return from_tensor_slices(std::move(arrays[x]), std::move(arrays[y]));
}

}  // namespace dtrain::data
