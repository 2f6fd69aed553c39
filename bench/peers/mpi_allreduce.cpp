// Peer for allreduce_perf: Open MPI's MPI_Allreduce (in place, floats), run over TCP:
//   mpirun --mca btl tcp,self -np 2 mpi_allreduce -b 4K -e 64M -f 4 -n 20 -w 5
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static std::size_t bytes_arg(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return std::size_t(v);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  std::size_t lo = 4096, hi = std::size_t(64) << 20, f = 4;
  int iters = 20, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "-b") lo = bytes_arg(argv[i + 1]);
    else if (k == "-e") hi = bytes_arg(argv[i + 1]);
    else if (k == "-f") f = std::strtoul(argv[i + 1], nullptr, 10);
    else if (k == "-n") iters = std::atoi(argv[i + 1]);
    else if (k == "-w") warmup = std::atoi(argv[i + 1]);
  }
  std::vector<float> buf(hi / 4, 0.0f);
  if (rank == 0) {
    std::printf("# Open MPI MPI_Allreduce: %d ranks on loopback (btl tcp,self), %d iterations, %d warmup\n", p, iters, warmup);
    std::printf("#%12s %12s %8s %6s %12s %8s %8s %8s\n", "size(B)", "count", "type", "redop", "time(us)", "algbw", "busbw", "#wrong");
  }
  for (std::size_t bytes = lo; bytes <= hi; bytes *= f) {
    const int n = int(bytes / 4);
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t.push_back((MPI_Wtime() - t0) * 1e6);
    }
    std::sort(t.begin(), t.end());
    double us = t[t.size() / 2];
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double algbw = double(bytes) / us / 1e3, busbw = algbw * 2.0 * (p - 1) / p;
    if (rank == 0) std::printf(" %12zu %12d %8s %6s %12.1f %8.2f %8.2f %8d\n", bytes, n, "float", "sum", us, algbw, busbw, -1);
  }
  MPI_Finalize();
}
