#pragma once
/// \file
/// The one place the library reads environment variables: every `DTRAIN_*` variable it obeys is named
/// here with what it does (docs/troubleshooting.md and docs/distributed.md say when to set them), and
/// the cluster resolvers read the launchers' own variables (TF_CONFIG, Slurm's, torchrun's, Open MPI's)
/// through `environment::get`.

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace dtrain::environment {

/// The value of variable `name`; empty when it is unset.
inline std::string get(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
/// The first of the variables that is set and not empty, else empty.
inline std::string get_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (std::string v = get(n); !v.empty()) return v;
  return "";
}

/// Math threads of the process (default: OpenBLAS' count, else the cores).
inline constexpr const char* num_threads = "DTRAIN_NUM_THREADS";
/// `baseline`, `avx2` or `avx512`: the instruction set the cpu kernels use, at most the CPU's.
inline constexpr const char* cpu_isa = "DTRAIN_CPU_ISA";
/// `dtrain` (default) or `blas`: who computes the GEMMs the cpu backend's direct GEMM declines.
inline constexpr const char* gemm = "DTRAIN_GEMM";
/// `live`: progress bars redraw themselves on a pipe as on a terminal.
inline constexpr const char* progress = "DTRAIN_PROGRESS";
/// The folder of the Fashion-MNIST IDX files (default: Debian's).
inline constexpr const char* fashion_mnist_dir = "DTRAIN_FASHION_MNIST_DIR";
/// `1`: ring_tcp's connections use TLS 1.3 keyed by the job token.
inline constexpr const char* tls = "DTRAIN_TLS";
/// `0`: ranks on one host all-reduce over TCP, not shared memory.
inline constexpr const char* shm = "DTRAIN_SHM";
/// `0`: ring_tcp's frames carry no CRC32C.
inline constexpr const char* frame_checksums = "DTRAIN_FRAME_CHECKSUMS";
/// The job token that authenticates the ranks of one job, or the file holding it.
inline constexpr const char* job_token = "DTRAIN_JOB_TOKEN";
inline constexpr const char* job_token_file = "DTRAIN_JOB_TOKEN_FILE";
/// `1`: a rank without a job token on a cluster beyond loopback refuses to start.
inline constexpr const char* require_job_token = "DTRAIN_REQUIRE_JOB_TOKEN";
/// Under Slurm: the port of rank 0's rendezvous.
inline constexpr const char* port = "DTRAIN_PORT";
/// Under mpirun: rank 0's address and port (before MASTER_ADDR / MASTER_PORT).
inline constexpr const char* master_addr = "DTRAIN_MASTER_ADDR";
inline constexpr const char* master_port = "DTRAIN_MASTER_PORT";

}  // namespace dtrain::environment
