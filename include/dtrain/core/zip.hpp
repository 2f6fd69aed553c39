#pragma once
/// \file
/// Zip archives in memory, the container of .npz and .keras files. Read and written here rather than
/// through a zip library: they need only local headers, the central directory and raw deflate, which
/// zlib (already a dependency) provides with the CRC-32. Reading checks every size the archive claims
/// against the bytes that are there before allocating, and each entry's CRC; zip64 (over 4 GiB),
/// encryption, several volumes and methods other than stored and deflate are refused with a clear error.
/// Writing stores entries uncompressed, as numpy.savez and Keras do.

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/file_io.hpp"

namespace dtrain::detail {

/// A zip archive's directory over its bytes (which must outlive it). `what` (the file) begins every error.
class zip_view {
 public:
  struct entry {
    std::string name;
    std::size_t method = 0, compressed = 0, size = 0, data = 0;  // data: where its bytes start
    std::uint32_t crc = 0;
  };

  zip_view(std::span<const char> bytes, std::string what) : z_(bytes), what_(std::move(what)) {
    const char* z = z_.data();
    // the end-of-central-directory record: 22 bytes, then a comment of up to 64 KiB
    std::size_t eocd = std::string::npos;
    if (z_.size() >= 22)
      for (std::size_t i = z_.size() - 22;; --i) {
        if (le(z + i, 4) == 0x06054b50 && i + 22 + le(z + i + 20, 2) <= z_.size()) {
          eocd = i;
          break;
        }
        if (i == 0 || z_.size() - 22 - i >= 0xffff) break;
      }
    if (eocd == std::string::npos)
      throw fail("not a zip archive (no end-of-central-directory record; truncated, or another kind of file?)");
    const std::size_t disk = le(z + eocd + 4, 2), cd_disk = le(z + eocd + 6, 2), here = le(z + eocd + 8, 2),
                      count = le(z + eocd + 10, 2), cd_size = le(z + eocd + 12, 4), cd = le(z + eocd + 16, 4);
    if (count == 0xffff || cd_size == 0xffffffff || cd == 0xffffffff || (eocd >= 20 && le(z + eocd - 20, 4) == 0x07064b50))
      throw fail("zip64 archives are not supported (they are written for entries over 4 GiB)");
    if (disk != 0 || cd_disk != 0 || here != count) throw fail("multi-volume zip archives are not supported");
    if (cd > eocd || cd_size > eocd - cd) throw fail("corrupt zip: the central directory lies outside the file (truncated?)");
    std::size_t at = cd;
    std::set<std::string> names;
    for (std::size_t k = 0; k < count; ++k) {
      if (at + 46 > cd + cd_size || le(z + at, 4) != 0x02014b50)
        throw fail("corrupt zip central directory (entry " + std::to_string(k) + ")");
      const char* c = z + at;
      const std::size_t flags = le(c + 8, 2), nlen = le(c + 28, 2), xlen = le(c + 30, 2), clen = le(c + 32, 2),
                        local = le(c + 42, 4);
      if (at + 46 + nlen + xlen + clen > cd + cd_size)
        throw fail("corrupt zip central directory (entry " + std::to_string(k) + ")");
      entry e{std::string(c + 46, nlen), le(c + 10, 2), le(c + 20, 4), le(c + 24, 4), 0,
              static_cast<std::uint32_t>(le(c + 16, 4))};
      at += 46 + nlen + xlen + clen;
      if (e.name.empty()) throw fail("corrupt zip: entry " + std::to_string(k) + " has an empty name");
      if (e.name.back() == '/') continue;  // a folder
      if (e.compressed == 0xffffffff || e.size == 0xffffffff || local == 0xffffffff)
        throw fail("entry '" + e.name + "' is zip64, which is not supported (over 4 GiB)");
      if (flags & 1) throw fail("entry '" + e.name + "' is encrypted");
      if (local > cd || cd - local < 30 || le(z + local, 4) != 0x04034b50)
        throw fail("corrupt zip: no local header for entry '" + e.name + "'");
      e.data = local + 30 + le(z + local + 26, 2) + le(z + local + 28, 2);
      if (e.data > cd || e.compressed > cd - e.data)
        throw fail("truncated: entry '" + e.name + "' (" + std::to_string(e.compressed) +
                   " bytes) runs past the end of its data");
      if (!names.insert(e.name).second) throw fail("the archive holds '" + e.name + "' twice");
      entries_.push_back(std::move(e));
    }
  }

  const std::vector<entry>& entries() const { return entries_; }
  const entry* find(std::string_view name) const {
    const auto i = std::find_if(entries_.begin(), entries_.end(), [&](const entry& e) { return e.name == name; });
    return i == entries_.end() ? nullptr : &*i;
  }

  /// The entry's bytes, inflated and checked against its CRC. Its recorded size is a claim of the file:
  /// over `cap`, or more than its compressed bytes can hold (deflate expands at most 1032:1), it is
  /// refused before anything is allocated.
  std::string read(const entry& e, std::uint64_t cap = std::numeric_limits<std::uint64_t>::max()) const {
    if (e.size > cap)
      throw fail("entry '" + e.name + "' claims " + std::to_string(e.size) + " bytes, over the " + std::to_string(cap) +
                 " it may hold");
    const char* data = z_.data() + e.data;
    std::string raw;
    if (e.method == 0) {
      if (e.compressed != e.size)
        throw fail("corrupt stored entry '" + e.name + "' (sizes " + std::to_string(e.compressed) + " and " +
                   std::to_string(e.size) + " differ)");
      raw.assign(data, e.size);
    } else if (e.method == 8) {
      if (e.size > e.compressed * 1032 + 64)
        throw fail("corrupt compressed entry '" + e.name + "': " + std::to_string(e.compressed) +
                   " bytes cannot inflate to the " + std::to_string(e.size) + " bytes the archive records");
      raw.assign(e.size, '\0');
      z_stream s{};
      if (inflateInit2(&s, -MAX_WBITS) != Z_OK) throw fail("zlib cannot start inflating '" + e.name + "'");
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
      s.avail_in = static_cast<uInt>(e.compressed);
      s.next_out = reinterpret_cast<Bytef*>(raw.data());
      s.avail_out = static_cast<uInt>(e.size);
      const int r = inflate(&s, Z_FINISH);
      const std::string why = s.msg ? s.msg : "the data does not inflate to the recorded size";
      const auto produced = s.total_out;
      inflateEnd(&s);
      if (r != Z_STREAM_END || produced != e.size) throw fail("corrupt compressed entry '" + e.name + "' (" + why + ")");
    } else {
      throw fail("entry '" + e.name + "' uses zip compression method " + std::to_string(e.method) +
                 " (only stored and deflate are read)");
    }
    if (crc32_of(raw.data(), raw.size()) != e.crc)
      throw fail("CRC mismatch in entry '" + e.name + "' (the archive is damaged)");
    return raw;
  }

 private:
  io_error fail(const std::string& why) const { return io_error(what_ + ": " + why); }
  std::span<const char> z_;
  std::string what_;
  std::vector<entry> entries_;
};

/// A zip archive of `entries` (name, bytes), stored uncompressed, dated 1980-01-01 (the earliest zip
/// date, so that equal contents give equal files). `what` (the file) begins every error.
inline std::string zip_archive(const std::vector<std::pair<std::string, std::string_view>>& entries,
                               const std::string& what) {
  if (entries.size() >= 0xffff) throw io_error(what + ": " + std::to_string(entries.size()) + " entries need zip64");
  constexpr std::uint64_t dos_date = (0u << 9) | (1u << 5) | 1u;
  std::string out, cd;
  for (const auto& [name, bytes] : entries) {
    if (name.empty()) throw value_error(what + ": a zip entry needs a non-empty name");
    if (name.size() > 0xffff) throw value_error(what + ": entry name '" + name.substr(0, 40) + "...' is too long");
    if (bytes.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      throw io_error(what + ": entry '" + name + "' would need zip64 (over 4 GiB)");
    const bool utf8 = std::any_of(name.begin(), name.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; });
    const std::uint64_t flags = utf8 ? 1u << 11 : 0u, crc = crc32_of(bytes.data(), bytes.size());
    const std::size_t local = out.size();
    put_le(out, 0x04034b50, 4), put_le(out, 20, 2), put_le(out, flags, 2), put_le(out, 0, 2), put_le(out, 0, 2);
    put_le(out, dos_date, 2), put_le(out, crc, 4), put_le(out, bytes.size(), 4), put_le(out, bytes.size(), 4);
    put_le(out, name.size(), 2), put_le(out, 0, 2);
    out += name;
    out += bytes;
    put_le(cd, 0x02014b50, 4), put_le(cd, (3 << 8) | 20, 2), put_le(cd, 20, 2), put_le(cd, flags, 2);
    put_le(cd, 0, 2), put_le(cd, 0, 2), put_le(cd, dos_date, 2), put_le(cd, crc, 4), put_le(cd, bytes.size(), 4);
    put_le(cd, bytes.size(), 4), put_le(cd, name.size(), 2), put_le(cd, 0, 2), put_le(cd, 0, 2), put_le(cd, 0, 2);
    put_le(cd, 0, 2), put_le(cd, std::uint64_t(0100644) << 16, 4), put_le(cd, local, 4);
    cd += name;
  }
  if (out.size() + cd.size() >= 0xffffffffu) throw io_error(what + ": the archive would need zip64 (over 4 GiB)");
  const std::size_t cd_at = out.size();
  out += cd;
  put_le(out, 0x06054b50, 4), put_le(out, 0, 2), put_le(out, 0, 2), put_le(out, entries.size(), 2);
  put_le(out, entries.size(), 2), put_le(out, cd.size(), 4), put_le(out, cd_at, 4), put_le(out, 0, 2);
  return out;
}

}  // namespace dtrain::detail
