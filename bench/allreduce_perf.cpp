// allreduce_perf: dtrain's ring all-reduce over TCP, measured the way nccl-tests measures
// (all_reduce_perf): ranks are processes on loopback, rank 0 prints one row per size.
//   allreduce_perf -b 4K -e 64M -f 4 -n 20 -w 5 -c 1 -p 2 [-o sum|mean|max|min] [-t 0|1]
// -t 1: with a job token and TLS 1.3 on the data plane (docs/security.md). -s 1: through shared memory
// (every rank is on this host), as training on one host runs; the default, -s 0, is the TCP ring.
// Built with DTRAIN_BENCH_MPI (mpi_comm_perf), the same table for comm::mpi, run under mpirun (the ranks
// are MPI's; -p is ignored); -k 0 skips its collective agreement check. -z bf16|fp16: the values travel
// in 16 bits (communication_options::gradient_compression); sizes and bandwidths are the floats'.
// algbw = size / time; busbw = algbw * 2 (p - 1) / p, comparable across rank counts.
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef DTRAIN_BENCH_MPI
#include <dtrain/distribute/comm/mpi.hpp>
#else
#include <dtrain/distribute/comm/ring_tcp.hpp>
#endif

#include "allreduce_table.hpp"

namespace {

struct args : allreduce_table::sweep {
  int check = 1;
  int tls = 0;
  int shm = 0;  // ranks on one host: all-reduce through shared memory (off: the TCP ring on loopback)
  int checksums = 1;  // frames carry a CRC-32C (without TLS)
  int agree = 1;  // comm::mpi: compare each collective across the ranks first
  dtrain::compression wire = dtrain::compression::none;  // -z: the values on the wire
  int rank = -1;  // -r with -a: this process is that rank of a cluster on other hosts
  std::vector<std::string> addresses;
  std::size_t chunk = std::size_t{1} << 20;
  dtrain::reduce_op op = dtrain::reduce_op::sum;
  const char* op_name = "sum";
};

constexpr const char* usage_text =
    "usage: allreduce_perf [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1] [-p ranks] [-o op] "
    "[-C frame bytes] [-t 0|1] [-s 0|1] [-x 0|1] [-k 0|1] [-z none|bf16|fp16] [-r rank -a addresses]\n"
    "All-reduce bus bandwidth of dtrain's TCP ring among -p ranks on loopback, nccl-tests style: sizes from -b to -e\n"
    "(K, M, G suffixes), times -f; -c 1 checks the results; -o sum|mean|max|min; -t 1 over TLS;\n"
    "-s 1 through shared memory instead of TCP (what ranks on one host use in training);\n"
    "-x 0 with frames that carry no CRC-32C (what the checksum costs);\n"
    "-z bf16|fp16 with the values in 16 bits on the wire (sizes and bandwidths stay the floats').\n"
    "Built as mpi_comm_perf: comm::mpi under mpirun instead (-k 0: without its collective agreement check).\n"
    "-r rank -a host:port,host:port,...: be that rank of a ring on those addresses (one process per host).\n";

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "allreduce_perf: %s; see allreduce_perf --help\n", why.c_str());
  std::exit(2);
}

int zero_or_one(const std::string& flag, const std::string& v) {
  if (v != "0" && v != "1") usage_error("bad value '" + v + "' for " + flag + " (expected 0 or 1)");
  return v == "1";
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error("missing value after " + k);
    const char* v = argv[i + 1];
    if (allreduce_table::parse_flag(a, k, v)) continue;
    if (k == "-c") a.check = zero_or_one(k, v);
    else if (k == "-t") a.tls = zero_or_one(k, v);
    else if (k == "-s") a.shm = zero_or_one(k, v);
    else if (k == "-x") a.checksums = zero_or_one(k, v);
    else if (k == "-k") a.agree = zero_or_one(k, v);
    else if (k == "-r") a.rank = std::atoi(v);
    else if (k == "-a") {
      for (std::string list = v; !list.empty();) {
        const auto comma = list.find(',');
        a.addresses.push_back(list.substr(0, comma));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    }
    else if (k == "-C") a.chunk = allreduce_table::bytes_arg(v);
    else if (k == "-z") {
      const std::string z = v;
      if (z != "none" && z != "bf16" && z != "fp16") usage_error("bad value '" + z + "' for -z (none, bf16 or fp16)");
      a.wire = z == "bf16" ? dtrain::compression::bf16 : z == "fp16" ? dtrain::compression::fp16 : dtrain::compression::none;
    }
    else if (k == "-o") {
      a.op_name = v;
      const std::string o = v;
      a.op = o == "mean" ? dtrain::reduce_op::mean : o == "max" ? dtrain::reduce_op::max
             : o == "min" ? dtrain::reduce_op::min : dtrain::reduce_op::sum;
      if (o != "sum" && o != "mean" && o != "max" && o != "min") usage_error("bad value '" + o + "' for -o (sum, mean, max or min)");
    } else {
      usage_error("unknown option " + k);
    }
  }
  allreduce_table::check(a, "allreduce_perf");
  if ((a.rank >= 0) != !a.addresses.empty()) usage_error("-r and -a go together");
  if (!a.addresses.empty()) {
    a.ranks = int(a.addresses.size());
    if (a.rank >= a.ranks) usage_error("-r " + std::to_string(a.rank) + " is not one of the " + std::to_string(a.ranks) + " addresses");
  }
  return a;
}

#ifndef DTRAIN_BENCH_MPI
std::vector<std::string> free_addresses(int n) {
  std::vector<int> fds;
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    fds.push_back(fd);
    out.push_back("127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  }
  for (int fd : fds) ::close(fd);
  return out;
}
#endif

/// The value rank r holds at index i for checking: small integers, exact in any summation order.
float value(int r, std::size_t i) { return float((i % 7) + std::size_t(r)); }

template <class Comm>
int run_rank(const args& a, Comm& comm, const char* title) {
  const int p = comm.size(), rank = comm.rank();
  std::vector<float> buf(a.max_bytes / 4);
  if (rank == 0) allreduce_table::print_header(title, p, a);
  double sum_busbw = 0;
  int rows = 0;
  long wrong_total = 0;
  for (std::size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.factor) {
    const std::size_t n = bytes / 4;
    std::span<float> data(buf.data(), n);
    std::fill(data.begin(), data.end(), 0.0f);
    for (int i = 0; i < a.warmup; ++i) comm.all_reduce(data, a.op, a.wire);
    comm.barrier();
    std::vector<double> times;
    for (int i = 0; i < a.iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      comm.all_reduce(data, a.op, a.wire);
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    float t = float(times[times.size() / 2]);  // median; the slowest rank's median is reported
    comm.all_reduce(std::span<float>(&t, 1), dtrain::reduce_op::max);
    long wrong = 0;
    if (a.check) {
      for (std::size_t i = 0; i < n; ++i) data[i] = value(rank, i);
      comm.all_reduce(data, a.op, a.wire);
      for (std::size_t i = 0; i < n; ++i) {
        float e = value(0, i);
        for (int r = 1; r < p; ++r)
          e = a.op == dtrain::reduce_op::max ? std::max(e, value(r, i))
              : a.op == dtrain::reduce_op::min ? std::min(e, value(r, i)) : e + value(r, i);
        if (a.op == dtrain::reduce_op::mean) e *= 1.0f / float(p);
        wrong += data[i] != e;
      }
      float w = float(wrong);
      comm.all_reduce(std::span<float>(&w, 1), dtrain::reduce_op::sum);
      wrong = long(w);
    }
    if (rank == 0) sum_busbw += allreduce_table::print_row(bytes, a.op_name, t, p, a.check ? wrong : -1L);
    ++rows, wrong_total += wrong;
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.3f\n", sum_busbw / rows);
    std::fflush(stdout);
  }
  return wrong_total ? 1 : 0;
}

}  // namespace

#ifdef DTRAIN_BENCH_MPI
int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  const dtrain::cluster_info c = dtrain::comm::mpi::resolve_cluster();
  dtrain::comm::mpi comm({.rank = c.rank, .world_size = c.world_size, .fingerprint = c.fingerprint(),
                          .check_collectives = a.agree != 0});
  try {
    return run_rank(a, comm, a.agree ? "dtrain comm::mpi all_reduce" : "dtrain comm::mpi all_reduce, no agreement check");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", c.rank, e.what());
    return 1;
  }
}
#else
int run_ring_rank(const args& a, int rank, const std::vector<std::string>& addrs) {
  dtrain::comm::ring_tcp comm({.rank = rank, .world_size = a.ranks, .addresses = addrs, .fingerprint = 1,
                               .chunk_bytes = a.chunk,
                               .job_token = a.tls ? "allreduce-perf-job-token" : "",
                               .tls = a.tls != 0,
                               .log = [](const std::string&) {},
                               .shared_memory = a.shm != 0,
                               .frame_checksums = a.checksums != 0});
  if (a.shm && comm.transport() != "shared memory") {
    std::fprintf(stderr, "allreduce_perf: -s 1, but the ranks could not share memory (not on one host?)\n");
    return 1;
  }
  return run_rank(a, comm, a.shm   ? "dtrain ring_tcp all_reduce, shared memory"
                           : a.tls ? "dtrain ring_tcp all_reduce, TLS 1.3"
                           : a.checksums ? "dtrain ring_tcp all_reduce, TCP"
                                         : "dtrain ring_tcp all_reduce, TCP without frame checksums");
}

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  if (a.rank >= 0) try {  // one rank of a ring across hosts
      return run_ring_rank(a, a.rank, a.addresses);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", a.rank, e.what());
      return 1;
    }
  const auto addrs = free_addresses(a.ranks);
  std::vector<pid_t> kids;
  for (int r = 1; r < a.ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = run_ring_rank(a, r, addrs);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  int code = 0;
  try {
    code = run_ring_rank(a, 0, addrs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    code = 1;
    for (pid_t k : kids) ::kill(k, SIGTERM);  // e.g. its port was taken: the others would wait to connect
  }
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) code = 1;
  }
  return code;
}
#endif
