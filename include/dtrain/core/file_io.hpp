#pragma once
/// \file
/// What every file dtrain writes goes through: an atomic, durable write (a temporary file in the same
/// folder, fsync, rename over the target, fsync of the folder: a reader, or a restart after a crash, sees
/// the old file or the new one, never a part), and the CRC-32 its formats carry (zlib's: the one zip and
/// gzip use).

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>

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

/// Creates the folder `path` goes into, with its parents; an `io_error` naming both when it cannot.
inline void create_folder_of(const std::filesystem::path& path) {
  if (!path.has_parent_path()) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    throw io_error(path.string() + ": cannot create the folder " + path.parent_path().string() + " (" +
                   ec.message() + ")");
}

/// Writes `bytes` to `path` atomically and durably, into a folder that exists. Every failure is an
/// `io_error` naming the path and the reason, and leaves no temporary file behind.
inline void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes) {
  static std::atomic<unsigned> serial{0};
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  const auto tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()) + "_" +
                          std::to_string(serial++));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error(path.string() + ": cannot create " + tmp.string() + " (" + std::strerror(errno) + ")");
  auto fail = [&](const std::string& what, bool close_fd) {
    const std::string why = std::strerror(errno);
    if (close_fd) ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return io_error(path.string() + ": " + what + " failed (" + why + ")");
  };
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw fail("write", true);
    done += std::size_t(w);
  }
  if (::fsync(fd) != 0) throw fail("fsync", true);
  if (::close(fd) != 0) throw fail("close", false);
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw io_error(path.string() + ": cannot rename the written file into place (" + ec.message() + ")");
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) ::fsync(dfd), ::close(dfd);
}

}  // namespace dtrain::detail
