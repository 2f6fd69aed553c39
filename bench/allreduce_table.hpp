#pragma once
// What allreduce_perf and its peers (peers/gloo_allreduce.cpp, peers/mpi_allreduce.cpp) share, so the
// three print comparable tables: the size sweep's flags and nccl-tests' columns.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace allreduce_table {

/// The sizes and repetitions of a run: -b min -e max -f factor -n iters -w warmup -p ranks.
struct sweep {
  std::size_t min_bytes = 4096, max_bytes = std::size_t{64} << 20, factor = 4;
  int iters = 20, warmup = 5, ranks = 2;
};

/// "4K", "64M", "1G" or plain bytes.
inline std::size_t bytes_arg(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return std::size_t(v);
}

/// Applies one of the sweep's flags; false when `flag` is not one of them.
inline bool parse_flag(sweep& s, const std::string& flag, const char* v) {
  if (flag == "-b") s.min_bytes = bytes_arg(v);
  else if (flag == "-e") s.max_bytes = bytes_arg(v);
  else if (flag == "-f") s.factor = std::max<std::size_t>(2, std::strtoul(v, nullptr, 10));
  else if (flag == "-n") s.iters = std::atoi(v);
  else if (flag == "-w") s.warmup = std::atoi(v);
  else if (flag == "-p") s.ranks = std::atoi(v);
  else return false;
  return true;
}

/// Leaves the program with a message when the sweep makes no sense.
inline void check(const sweep& s, const char* program) {
  if (s.ranks < 1 || s.iters < 1 || s.warmup < 0 || s.min_bytes < 4 || s.max_bytes < s.min_bytes) {
    std::fprintf(stderr, "%s: bad arguments (need -p >= 1, -n >= 1, -w >= 0, 4 <= -b <= -e)\n", program);
    std::exit(2);
  }
}

/// The title line (`what` names the implementation) and the column header.
inline void print_header(const char* what, int ranks, const sweep& s) {
  std::printf("# %s: %d ranks (processes) on loopback, %d iterations, %d warmup\n", what, ranks, s.iters, s.warmup);
  std::printf("#%12s %12s %8s %6s %12s %8s %8s %8s\n", "size(B)", "count", "type", "redop", "time(us)", "algbw",
              "busbw", "#wrong");
}

/// One row; `us` is the slowest rank's median. Returns busbw = algbw * 2 (p - 1) / p in GB/s.
inline double print_row(std::size_t bytes, const char* op, double us, int ranks, long wrong) {
  const double algbw = double(bytes) / us / 1e3, busbw = algbw * 2.0 * (ranks - 1) / ranks;
  std::printf(" %12zu %12zu %8s %6s %12.1f %8.2f %8.2f %8ld\n", bytes, bytes / 4, "float", op, us, algbw, busbw, wrong);
  return busbw;
}

}  // namespace allreduce_table
