#pragma once
/// \file
/// safetensors files (8-byte little-endian header length, a JSON header, raw little-endian data), the
/// format dtrain saves weights in, so Python reads them with numpy or the safetensors package.
/// dtrain adds to `__metadata__` (string values, as the format requires) a CRC-32 per tensor, checked
/// on load, so a truncated or bit-flipped file is detected rather than loaded.
///
/// Writes are atomic and durable: a temporary file in the same folder, fsync, rename, fsync of the
/// folder. A crash at any instant leaves either the old file or the new one, never a mix.

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/core/error.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/core/shape.hpp"

namespace dtrain::checkpoint {

/// One named tensor that was read (owned): float32 values in `data`, or for an I64 tensor (Keras keeps
/// the optimizer's iteration count as int64) its values in `int64` and none in `data`.
struct named_tensor {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> data;
  std::vector<std::int64_t> int64 = {};
};

/// One named tensor to write (a view): float32 `data`, or an I64 tensor when `int64` is not empty.
struct tensor_view {
  std::string name;
  std::vector<std::size_t> shape;
  std::span<const float> data;
  std::span<const std::int64_t> int64 = {};
};

namespace detail {
inline std::string hex32(std::uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

inline std::vector<char> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))  // a folder opens as a stream of unknown size
    throw io_error(path.string() + ": cannot open (" + (ec ? ec.message() : "not a regular file") + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(path.string() + ": cannot open");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) throw io_error(path.string() + ": cannot read its size");
  const auto size = static_cast<std::size_t>(end);
  in.seekg(0);
  std::vector<char> b(size);
  if (size && !in.read(b.data(), static_cast<std::streamsize>(size))) throw io_error(path.string() + ": read failed");
  return b;
}
}  // namespace detail

/// Writes float32 (and int64) tensors and string metadata as a safetensors file (atomically).
inline void save_safetensors(const std::filesystem::path& path, const std::vector<tensor_view>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  std::size_t offset = 0;
  std::vector<std::span<const std::byte>> bytes;
  for (const auto& t : tensors) {
    const bool i64 = !t.int64.empty();
    bytes.push_back(i64 ? std::as_bytes(t.int64) : std::as_bytes(t.data));
    const std::size_t values = i64 ? t.int64.size() : t.data.size();
    std::size_t n = 1;
    for (auto d : t.shape) n *= d;
    if (n != values)
      throw shape_error("save_safetensors: tensor '" + t.name + "' has " + std::to_string(values) + " values for shape " +
                        shape_str(t.shape));
    const std::size_t size = bytes.back().size();
    header[t.name] = {{"dtype", i64 ? "I64" : "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + size}}};
    meta["dtrain.crc32." + t.name] = detail::hex32(dtrain::detail::crc32_of(bytes.back().data(), size));
    offset += size;
  }
  header["__metadata__"] = meta;
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h += ' ';  // the format allows padding the header with spaces
  std::vector<char> out(8 + h.size() + offset);
  const std::uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, h.data(), h.size());
  std::size_t at = 8 + h.size();
  for (const auto& b : bytes) {
    if (!b.empty()) std::memcpy(out.data() + at, b.data(), b.size());
    at += b.size();
  }
  dtrain::detail::create_folder_of(path);
  dtrain::detail::write_file_atomic(path, out);
}

struct safetensors_file {
  std::vector<named_tensor> tensors;  // in file order
  std::map<std::string, std::string> metadata;

  const named_tensor* find(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

/// Parses the bytes of a safetensors file of float32 and int64 tensors (`f` names it in errors), checking its
/// structure and (when present) the CRC-32 of every tensor. Every defect is an `io_error` naming the
/// file and what is wrong.
inline safetensors_file parse_safetensors(std::span<const char> b, const std::string& f) {
  if (b.size() < 8) throw io_error(f + ": truncated safetensors file (" + std::to_string(b.size()) + " bytes)");
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(b[std::size_t(i)]);
  if (len > b.size() - 8) throw io_error(f + ": truncated safetensors file (header of " + std::to_string(len) + " bytes)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(len));
  } catch (const nlohmann::json::exception& e) {
    throw io_error(f + ": corrupt safetensors header (" + e.what() + ")");
  }
  if (!header.is_object()) throw io_error(f + ": corrupt safetensors header (not a JSON object)");
  safetensors_file out;
  const std::size_t data_size = b.size() - 8 - len;
  const char* data = b.data() + 8 + len;
  struct entry {
    std::string name;
    std::size_t begin;
  };
  std::vector<entry> order;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw io_error(f + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      throw io_error(f + ": tensor '" + it.key() + "' lacks dtype, shape or data_offsets");
    if (t["dtype"] != "F32" && t["dtype"] != "I64")
      throw io_error(f + ": tensor '" + it.key() + "' has dtype " + t["dtype"].dump() + "; dtrain reads F32 and I64");
    const bool i64 = t["dtype"] == "I64";
    const std::size_t width = i64 ? 8 : 4;
    named_tensor nt{it.key(), {}, {}};
    std::size_t n = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) throw io_error(f + ": tensor '" + it.key() + "' has a bad shape");
      nt.shape.push_back(d.get<std::size_t>());
      if (nt.shape.back() != 0 && n > data_size / width / nt.shape.back())  // checked before it can wrap
        throw io_error(f + ": tensor '" + it.key() + "' has shape " + shape_str(nt.shape) + "..., more values than the file holds");
      n *= nt.shape.back();
    }
    const auto& off = t["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw io_error(f + ": tensor '" + it.key() + "' has bad data_offsets");
    const auto b0 = off[0].get<std::size_t>(), b1 = off[1].get<std::size_t>();
    if (b1 < b0 || b1 - b0 != n * width)
      throw io_error(f + ": tensor '" + it.key() + "' has data_offsets that do not fit its shape " + shape_str(nt.shape));
    if (b1 > data_size)
      throw io_error(f + ": truncated: tensor '" + it.key() + "' ends at byte " + std::to_string(b1) + " of " +
                     std::to_string(data_size) + " data bytes");
    if (i64) {
      nt.int64.resize(n);
      if (n) std::memcpy(nt.int64.data(), data + b0, n * 8);  // an empty vector's data() may be null
    } else {
      nt.data.resize(n);
      if (n) std::memcpy(nt.data.data(), data + b0, n * 4);
    }
    order.push_back({it.key(), b0});
    out.tensors.push_back(std::move(nt));
  }
  for (const auto& t : out.tensors) {
    auto c = out.metadata.find("dtrain.crc32." + t.name);
    const auto crc = t.int64.empty() ? dtrain::detail::crc32_of(t.data.data(), t.data.size() * 4)
                                     : dtrain::detail::crc32_of(t.int64.data(), t.int64.size() * 8);
    if (c != out.metadata.end() && c->second != detail::hex32(crc))
      throw io_error(f + ": checksum mismatch in tensor '" + t.name + "' (the file is damaged)");
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [&](const named_tensor& a, const named_tensor& c) {
    auto pos = [&](const std::string& n) {
      for (const auto& e : order)
        if (e.name == n) return e.begin;
      return std::size_t{0};
    };
    return pos(a.name) < pos(c.name);
  });
  return out;
}

/// Reads a safetensors file of float32 and int64 tensors: `parse_safetensors` of its bytes.
inline safetensors_file load_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(detail::read_file(path), path.string());
}

}  // namespace dtrain::checkpoint
