#pragma once
/// \file
/// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed (read through zlib, which
/// passes plain files through unchanged). Every defect is reported with the file name.

#include <zlib.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "dtrain/core/tensor.hpp"

namespace dtrain::data {

/// The most values an IDX file may hold (2^32: 16 GiB of float32).
inline constexpr std::size_t max_idx_values = std::size_t{1} << 32;

namespace detail {
class gz_file {
 public:
  explicit gz_file(const std::filesystem::path& p) : path_(p.string()), f_(gzopen(path_.c_str(), "rb")) {
    if (!f_) throw io_error(path_ + ": cannot open (" + std::string(std::strerror(errno)) + ")");
    gzbuffer(f_, 1 << 17);
  }
  gz_file(const gz_file&) = delete;
  gz_file& operator=(const gz_file&) = delete;
  ~gz_file() { gzclose(f_); }

  /// Reads up to n bytes; returns how many were read (throws on a corrupt stream).
  std::size_t read(void* dst, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int r = gzread(f_, static_cast<char*>(dst) + done, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(f_, &code);
        throw io_error(path_ + ": corrupt compressed data (" + std::string(msg ? msg : "zlib error") + ")");
      }
      if (r == 0) break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }
  const std::string& path() const { return path_; }
  /// The most bytes the file can give: its size, times 1032 when compressed (deflate's best ratio).
  std::size_t most_bytes() {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path_, ec);
    if (ec) return std::numeric_limits<std::size_t>::max();
    return gzdirect(f_) ? std::size_t(size) : std::size_t(size) * 1032 + 64;
  }

 private:
  std::string path_;
  gzFile f_;
};
}  // namespace detail

/// Reads an IDX file into a float tensor of its shape (values as stored, e.g. pixels 0..255).
inline tensor read_idx(const std::filesystem::path& path) {
  detail::gz_file f(path);
  std::array<unsigned char, 4> magic{};
  if (f.read(magic.data(), 4) != 4) throw io_error(f.path() + ": truncated IDX header (file shorter than 4 bytes)");
  if (magic[0] != 0 || magic[1] != 0)
    throw io_error(f.path() + ": bad IDX magic (first two bytes must be 0; is this an IDX file?)");
  const unsigned type = magic[2], rank = magic[3];
  std::size_t width = 0;
  switch (type) {
    case 0x08: case 0x09: width = 1; break;
    case 0x0B: width = 2; break;
    case 0x0C: case 0x0D: width = 4; break;
    case 0x0E: width = 8; break;
    default: throw io_error(f.path() + ": bad IDX magic (unknown element type 0x" + std::to_string(type) + ")");
  }
  if (rank == 0 || rank > 4) throw io_error(f.path() + ": bad IDX header (" + std::to_string(rank) + " dimensions)");
  extents dims(rank);
  std::size_t count = 1;
  for (auto& d : dims) {
    unsigned char b[4];
    if (f.read(b, 4) != 4) throw io_error(f.path() + ": truncated IDX header");
    d = (std::size_t(b[0]) << 24) | (std::size_t(b[1]) << 16) | (std::size_t(b[2]) << 8) | b[3];
  }
  std::size_t strides = 1;  // the product of the non-zero extents: an empty tensor's strides must not wrap either
  for (const std::size_t d : dims) {  // checked at every factor so that it cannot wrap
    if (d != 0 && strides > max_idx_values / d)
      throw io_error(f.path() + ": IDX header claims shape " + shape_str(dims) + ", more than " +
                     std::to_string(max_idx_values) + " values");
    strides *= d ? d : 1;
    count *= d;
  }
  if (count * width > f.most_bytes())  // before allocating what the header claims
    throw io_error(f.path() + ": truncated: the header promises shape " + shape_str(dims) + " (" +
                   std::to_string(count * width) + " bytes of data), more than the file can hold");
  std::vector<unsigned char> raw(count * width);
  const std::size_t got = f.read(raw.data(), raw.size());
  if (got != raw.size())
    throw io_error(f.path() + ": truncated: the header promises shape " + shape_str(dims) + " (" +
                   std::to_string(raw.size()) + " bytes of data) but only " + std::to_string(got) + " bytes follow");
  tensor out = zeros(dims);
  float* o = out.data();
  auto be = [&](std::size_t i) {  // big-endian word i as an unsigned integer
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < width; ++k) v = (v << 8) | raw[i * width + k];
    return v;
  };
  for (std::size_t i = 0; i < count; ++i) {
    switch (type) {
      case 0x08: o[i] = raw[i]; break;
      case 0x09: o[i] = static_cast<std::int8_t>(raw[i]); break;
      case 0x0B: o[i] = static_cast<std::int16_t>(be(i)); break;
      case 0x0C: o[i] = static_cast<float>(static_cast<std::int32_t>(be(i))); break;
      case 0x0D: o[i] = std::bit_cast<float>(static_cast<std::uint32_t>(be(i))); break;
      default: o[i] = static_cast<float>(std::bit_cast<double>(be(i))); break;
    }
  }
  return out;
}

}  // namespace dtrain::data
