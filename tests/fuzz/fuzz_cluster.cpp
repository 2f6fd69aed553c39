// The cluster resolvers: TF_CONFIG, Slurm's variables (hostlists, tasks per node), torchrun and Open MPI's;
// NUL-separated fields of the input are the variables' values.
#include <dtrain/distribute/cluster.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto f = dtrain_fuzz::fields(data + 1, size - 1, 7);
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    dtrain::cluster_info c;
    switch (data[0] % 4) {
      case 0: c = dtrain::tf_config_resolver{f[0]}.resolve(); break;
      case 1: c = dtrain::slurm_resolver{f[0], f[1], f[2], f[3], f[4], f[5], f[6]}.resolve(); break;
      case 2: c = dtrain::master_resolver{f[0], f[1], f[2], f[3], "torchrun", f[4], f[5]}.resolve(); break;
      default:
        (void)dtrain::expand_hostlist(f[0]);
        (void)dtrain::expand_tasks_per_node(f[1]);
        return;
    }
    // the resolver contract (cluster.hpp)
    if (c.world_size < 1 || c.rank < -1 || c.rank >= c.world_size ||
        (!c.ring.empty() && c.ring.size() != std::size_t(c.world_size)) ||
        (c.ring.empty() && c.world_size > 1 && !c.master) ||
        (c.in_ring() && (c.local_rank < 0 || c.local_rank >= c.local_size || c.local_size > c.world_size)))
      __builtin_trap();
    (void)c.fingerprint();
  });
  return 0;
}
