#pragma once
/// \file
/// What every file dtrain writes goes through: an atomic, durable write (a temporary file in the same
/// folder, fsync, rename over the target, fsync of the folder: a reader, or a restart after a crash, sees
/// the old file or the new one, never a part), deflate for the compressed ones (gzip, zlib), and the
/// CRC-32 its formats carry (zlib's: the one zip and gzip use).

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain::detail {

/// CRC-32 (ISO-HDLC, as zip, gzip and PNG) of `n` bytes at `p`.
inline std::uint32_t crc32_of(const void* p, std::size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  const auto* b = static_cast<const Bytef*>(p);
  while (n > 0) {  // zlib takes uInt lengths
    const auto k = static_cast<uInt>(std::min<std::size_t>(n, std::size_t(1) << 30));
    c = crc32(c, b, k);
    b += k, n -= k;
  }
  return static_cast<std::uint32_t>(c);
}

/// The whole file at `p`; an `io_error` naming it when it cannot be read.
inline std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw io_error(p.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<char> b(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) throw io_error(p.string() + ": read failed");
  return b;
}

/// An unsigned little-endian integer of `n` bytes, as file formats store them (byte by byte, so the
/// host's byte order is irrelevant), read at `p` or appended to `s`.
inline std::uint64_t le(const void* p, int n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}
inline void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

/// Creates the folder `path` goes into, with its parents; an `io_error` naming both when it cannot.
inline void create_folder_of(const std::filesystem::path& path) {
  if (!path.has_parent_path()) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    throw io_error(path.string() + ": cannot create the folder " + path.parent_path().string() + " (" +
                   ec.message() + ")");
}

/// A file written under a temporary name in its folder (which must exist) and put in place atomically
/// and durably by `commit()`. Destroyed uncommitted, it removes the temporary: what was at `path` stays.
/// Every failure is an `io_error` naming the path and the reason, and leaves no temporary behind.
class atomic_file {
 public:
  explicit atomic_file(std::filesystem::path path) : path_(std::move(path)) {
    static std::atomic<unsigned> serial{0};
    dir_ = path_.has_parent_path() ? path_.parent_path() : std::filesystem::path(".");
    tmp_ = dir_ / ("." + path_.filename().string() + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(serial++));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw io_error(path_.string() + ": cannot create " + tmp_.string() + " (" + std::strerror(errno) + ")");
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() { discard(); }

  const std::filesystem::path& path() const { return path_; }
  void write(std::span<const char> bytes) {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t w = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw fail("write");
      done += std::size_t(w);
    }
  }
  /// fsync, rename over `path`, fsync of the folder.
  void commit() {
    if (::fsync(fd_) != 0) throw fail("fsync");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw fail("close");
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) {
      discard();
      throw io_error(path_.string() + ": cannot rename the written file into place (" + ec.message() + ")");
    }
    tmp_.clear();
    if (const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) ::fsync(dfd), ::close(dfd);
  }
  /// Removes the temporary (nothing after a commit).
  void discard() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (tmp_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove(tmp_, ignored);
    tmp_.clear();
  }

 private:
  io_error fail(const std::string& what) {
    const std::string why = std::strerror(errno);
    discard();
    return io_error(path_.string() + ": " + what + " failed (" + why + ")");
  }
  std::filesystem::path path_, dir_, tmp_;
  int fd_ = -1;
};

/// A zlib deflate stream, gzip-framed (`gzip`) or in zlib's own framing, handing its output to
/// `sink(std::span<const char>)` as it comes: what every compressed file dtrain writes goes through.
/// `what` names the file in errors.
class deflater {
 public:
  deflater(bool gzip, std::string what) : what_(std::move(what)) {
    if (deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw io_error(what_ + ": zlib failed to start");
  }
  deflater(const deflater&) = delete;  // (zlib's state points back at its z_stream)
  deflater& operator=(const deflater&) = delete;
  ~deflater() { deflateEnd(&z_); }
  template <class Sink>
  void put(std::string_view in, Sink&& sink) {
    run(in, Z_NO_FLUSH, sink);
  }
  /// Ends the stream (its trailer goes to `sink`).
  template <class Sink>
  void finish(Sink&& sink) {
    run({}, Z_FINISH, sink);
  }

 private:
  template <class Sink>
  void run(std::string_view in, int flush, Sink& sink) {
    char out[1 << 15];
    do {  // zlib takes uInt lengths: the input in pieces
      const std::size_t piece = std::min<std::size_t>(in.size(), std::size_t(1) << 30);
      z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
      z_.avail_in = uInt(piece);
      const int last = piece == in.size() ? flush : Z_NO_FLUSH;
      int rc = Z_OK;
      do {
        z_.next_out = reinterpret_cast<Bytef*>(out);
        z_.avail_out = sizeof out;
        rc = deflate(&z_, last);
        if (rc == Z_STREAM_ERROR) throw io_error(what_ + ": zlib failed while compressing");
        sink(std::span<const char>(out, sizeof out - z_.avail_out));
      } while (z_.avail_out == 0 || (last == Z_FINISH && rc != Z_STREAM_END));
      in.remove_prefix(piece);
    } while (!in.empty());
  }
  z_stream z_{};
  std::string what_;
};

/// Writes `bytes` to `path` atomically and durably, into a folder that exists (see atomic_file).
inline void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes) {
  atomic_file f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace dtrain::detail
