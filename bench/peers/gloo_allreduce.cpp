// Peer for allreduce_perf: Gloo's ring all-reduce (gloo::AllreduceRing) over its TCP transport on
// loopback, ranks as processes rendezvousing through a FileStore. Prints allreduce_perf's columns.
//   gloo_allreduce -b 4K -e 64M -f 4 -n 20 -w 5 -p 2
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

static std::size_t bytes_arg(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return std::size_t(v);
}

int main(int argc, char** argv) {
  std::size_t lo = 4096, hi = std::size_t(64) << 20, f = 4;
  int iters = 20, warmup = 5, p = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "-b") lo = bytes_arg(argv[i + 1]);
    else if (k == "-e") hi = bytes_arg(argv[i + 1]);
    else if (k == "-f") f = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "-n") iters = std::atoi(argv[i + 1]);
    else if (k == "-w") warmup = std::atoi(argv[i + 1]);
    else if (k == "-p") p = std::atoi(argv[i + 1]);
  }
  const auto dir = std::filesystem::temp_directory_path() / ("gloo_store_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  int rank = 0;
  std::vector<pid_t> kids;
  for (int r = 1; r < p; ++r)
    if (pid_t pid = ::fork(); pid == 0) {
      rank = r;
      kids.clear();
      break;
    } else {
      kids.push_back(pid);
    }
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir.string());
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, p);
  ctx->connectFullMesh(store, dev);
  std::vector<float> buf(hi / 4, 0.0f);
  if (rank == 0) {
    std::printf("# gloo AllreduceRing: %d ranks (processes) on loopback, %d iterations, %d warmup\n", p, iters, warmup);
    std::printf("#%12s %12s %8s %6s %12s %8s %8s %8s\n", "size(B)", "count", "type", "redop", "time(us)", "algbw", "busbw", "#wrong");
  }
  for (std::size_t bytes = lo; bytes <= hi; bytes *= f) {
    const std::size_t n = bytes / 4;
    gloo::AllreduceRing<float> op(ctx, {buf.data()}, int(n));
    for (int i = 0; i < warmup; ++i) op.run();
    gloo::BarrierAllToOne(ctx).run();
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      op.run();
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    double us = t[t.size() / 2];  // the slowest rank's median, as dtrain's and MPI's benches report
    gloo::AllreduceRing<double>(ctx, {&us}, 1, gloo::ReductionFunction<double>::max).run();
    const double algbw = double(bytes) / us / 1e3, busbw = algbw * 2.0 * (p - 1) / p;
    if (rank == 0) std::printf(" %12zu %12zu %8s %6s %12.1f %8.2f %8.2f %8d\n", bytes, n, "float", "sum", us, algbw, busbw, -1);
  }
  std::fflush(stdout);
  if (rank != 0) ::_exit(0);
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  std::filesystem::remove_all(dir);
}
