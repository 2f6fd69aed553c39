// Peer for allreduce_perf: Open MPI's MPI_Allreduce (in place, floats), run over TCP:
//   mpirun --mca btl tcp,self -np 2 mpi_allreduce -b 4K -e 64M -f 4 -n 20 -w 5      (TCP)
//   mpirun --mca btl vader,self -np 2 mpi_allreduce -b 4K -e 64M -f 4 -n 20 -w 5    (shared memory)
#include <mpi.h>

#include "../allreduce_table.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  allreduce_table::sweep sw;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!allreduce_table::parse_flag(sw, argv[i], argv[i + 1])) {
      if (rank == 0) std::fprintf(stderr, "usage: mpi_allreduce [-b min] [-e max] [-f factor] [-n iters] [-w warmup]\n");
      MPI_Finalize();
      return 2;
    }
  sw.ranks = p;
  allreduce_table::check(sw, "mpi_allreduce");
  const int iters = sw.iters, warmup = sw.warmup;
  std::vector<float> buf(sw.max_bytes / 4, 0.0f);
  if (rank == 0) allreduce_table::print_header("Open MPI MPI_Allreduce (over the btl mpirun was given)", p, sw);
  for (std::size_t bytes = sw.min_bytes; bytes <= sw.max_bytes; bytes *= sw.factor) {
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
    if (rank == 0) allreduce_table::print_row(bytes, "sum", us, p, -1);
  }
  MPI_Finalize();
}
