#pragma once
/// \file
/// Cluster resolution: which processes form the all-reduce ring, in what order, and who this process is.
///
/// TF semantics (TF_CONFIG as TensorFlow's multi-worker tutorial sets it): jobs `chief`, `worker`, `ps`, `evaluator`; the chief is the
/// `chief` task when there is one, else worker 0; ring ranks are numbered as MultiWorkerMirroredStrategy
/// numbers them (the chief, then the workers in index order); `ps` and `evaluator` tasks are checked but
/// are not ring members (rank -1). Other launchers are read too: Slurm (`srun`), torchrun and Open MPI
/// (`mpirun`), which give a rank, a size and at most rank 0's address.
///
/// `resolve_cluster()` picks the source: an explicit spec in code, else TF_CONFIG, else the innermost
/// launcher's variables (torchrun, then Open MPI, then Slurm: `srun torchrun` and `mpirun` inside an
/// `sbatch` script inherit Slurm variables that describe the outer step, not this process), else one
/// worker without network.
///
/// Every malformed input throws a `config_error` that quotes the offending part (the address, the job,
/// the variable and its value, the JSON near the parse error).

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/core/environment.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/distribute/comm/communicator.hpp"

namespace dtrain {

/// A task's network address. IPv6 hosts are stored without brackets.
struct endpoint {
  std::string host;
  std::uint16_t port = 0;

  /// "host:port", or "[v6 address]:port": what `parse` reads back and the ring dials.
  std::string str() const;

  /// Parses "host:port" or "[v6 address]:port" (port 1..65535); throws `config_error` quoting `s`.
  static endpoint parse(const std::string& s);

  friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// `tf.train.ClusterSpec`: job name (chief, worker, ps, evaluator) -> task addresses in index order.
struct cluster_spec {
  std::map<std::string, std::vector<std::string>> jobs;
  /// TF's `num_tasks(job)`: how many tasks `job` has (0 when the spec has no such job).
  int num_tasks(const std::string& job) const {
    const auto it = jobs.find(job);
    return it == jobs.end() ? 0 : int(it->second.size());
  }
};

/// TF_CONFIG's `task`: this process's job and its index in that job.
struct task_spec {
  std::string type = "worker";
  int index = 0;
};

/// The resolved view of the cluster for this process.
struct cluster_info {
  cluster_spec spec{};                // as given (Slurm: the derived worker list); empty for torchrun/MPI
  std::string task_type = "worker";   // TF's `cluster_resolver.task_type`
  int task_id = 0;                    // TF's `cluster_resolver.task_id`
  int rank = 0;                       // position in the all-reduce ring; -1 for evaluator and ps tasks
  int world_size = 1;                 // number of ring members
  /// This process's index among the ring members on its host, and how many there are (torchrun's
  /// LOCAL_RANK and LOCAL_WORLD_SIZE): a worker takes the GPU of its local rank by default. From a
  /// cluster spec, members are on one host when their addresses name the same host; from a launcher,
  /// its variables (SLURM_LOCALID, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK and their sizes).
  int local_rank = 0;
  int local_size = 1;
  std::vector<endpoint> ring{};       // every member's address in rank order; empty when only `master` is known
  std::optional<endpoint> master{};   // rank 0's address, where rank 0 hands out the ring's addresses
  std::string source = "single";      // explicit, TF_CONFIG, Slurm, torchrun, Open MPI or single, for messages

  /// A ring member (the evaluator and ps tasks are not).
  bool in_ring() const { return rank >= 0; }
  /// The worker that saves and logs: the `chief` task, else worker 0 (both are rank 0).
  bool is_chief() const { return rank == 0; }
  /// A stable 64-bit hash (FNV-1a) of the ring's membership: world size, then each member's job name and
  /// address in rank order (members outside a spec count as workers), or rank 0's address when the ring is
  /// not known. It does not depend on which task this process is, so every member computes the same value;
  /// the ring's handshake compares it to refuse workers of another cluster. Same value on every platform.
  std::uint64_t fingerprint() const;
  /// "host:port" of every member in rank order, else of rank 0 alone (what a communicator connects to).
  std::vector<std::string> addresses() const {
    std::vector<std::string> a;
    for (const auto& e : ring) a.push_back(e.str());
    if (a.empty() && master) a.push_back(master->str());
    return a;
  }
};

/// Something that tells this process where it sits in the cluster.
///
/// Contract: `r.resolve()` (const, may read the environment) returns a `cluster_info` where
/// - `world_size >= 1`, and `rank` is in [0, world_size) for ring members, -1 for tasks outside the ring;
/// - `ring` is empty or holds exactly `world_size` distinct endpoints in rank order;
/// - when `ring` is empty and `world_size > 1`, `master` holds rank 0's address;
/// - `local_rank` is in [0, local_size) and `local_size` is in [1, world_size] for ring members;
/// - `is_chief()` is true for exactly one member of the cluster;
/// - every member of one cluster gets the same `fingerprint()`.
/// Malformed input throws `config_error` quoting the offending part; resolve never half-succeeds.
template <class R>
concept cluster_resolver = requires(const R& r) {
  { r.resolve() } -> std::same_as<cluster_info>;
};

/// Checks `spec` as TF does and places the task (`task_type`, `task_id`) in it; errors start with `source`.
cluster_info make_cluster_info(cluster_spec spec, const std::string& task_type, int task_id,
                               const std::string& source = "explicit");

/// TF's `SimpleClusterResolver`: a spec and task given in code; wins over every environment variable.
struct simple_cluster_resolver {
  cluster_spec spec;
  task_spec task{};
  cluster_info resolve() const { return make_cluster_info(spec, task.type, task.index, "explicit"); }
};

/// TF's `TFConfigClusterResolver`: the TF_CONFIG JSON, `{"cluster": {job: [address...]}, "task":
/// {"type": job, "index": i}}`. Other top-level keys (`environment`, `rpc_layer`) are ignored, as TF does.
struct tf_config_resolver {
  std::string text;  // the JSON
  static tf_config_resolver from_env();
  cluster_info resolve() const;
};

/// Expands a Slurm hostlist: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5 (zero padding
/// kept; several bracket groups in one name give every combination, as Slurm does). At most 65,536 hosts.
std::vector<std::string> expand_hostlist(const std::string& list);

/// Expands Slurm's tasks-per-node list: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_tasks_per_node(const std::string& list);

/// Slurm (`srun`): SLURM_PROCID is the rank, SLURM_NTASKS the world size; the ring is each node of
/// SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST) with its tasks in order (SLURM_STEP_TASKS_PER_NODE,
/// else SLURM_TASKS_PER_NODE; without either, spread as evenly as possible), as Slurm's default block
/// distribution places them. A task listens on DTRAIN_PORT (default 29500) plus its index on its node.
/// When SLURM_NODEID and SLURM_LOCALID are known they must agree with that layout (they do not under
/// `--distribution=cyclic`, which would give a wrong ring), so a mismatch is an error.
struct slurm_resolver {
  std::string procid, ntasks, nodelist, tasks_per_node, base_port;  // the variables' values ("" = unset)
  std::string node_id{}, local_id{};                                // optional consistency check
  static slurm_resolver from_env();
  cluster_info resolve() const;
};

/// A launcher that gives a rank, a world size and rank 0's address (torchrun, Open MPI): `ring` stays
/// empty and rank 0 collects and hands out the ring's addresses at the rendezvous. `source` ("torchrun",
/// "Open MPI") names the variables in messages. MASTER_PORT defaults to 29500.
struct master_resolver {
  std::string rank, world_size, master_addr, master_port, source = "torchrun";
  std::string local_rank{}, local_size{};  // "" = unset: local rank 0 of 1
  cluster_info resolve() const;
};

/// torchrun / `torch.distributed` env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK,
/// LOCAL_WORLD_SIZE.
struct torchrun_resolver {
  std::string rank, world_size, master_addr, master_port;
  std::string local_rank{}, local_size{};
  static torchrun_resolver from_env();
  cluster_info resolve() const {
    return master_resolver{rank, world_size, master_addr, master_port, "torchrun", local_rank, local_size}.resolve();
  }
};

/// Open MPI (`mpirun`): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
/// OMPI_COMM_WORLD_LOCAL_SIZE, and rank 0's address from DTRAIN_MASTER_ADDR / DTRAIN_MASTER_PORT, else
/// MASTER_ADDR / MASTER_PORT (mpirun does not give one).
struct mpi_resolver {
  std::string rank, world_size, master_addr, master_port;
  std::string local_rank{}, local_size{};
  static mpi_resolver from_env();
  cluster_info resolve() const {
    return master_resolver{rank, world_size, master_addr, master_port, "Open MPI", local_rank, local_size}.resolve();
  }
};

/// The cluster this process belongs to: `explicit_cluster` if given, else TF_CONFIG, else torchrun
/// (RANK and WORLD_SIZE set), Open MPI (OMPI_COMM_WORLD_RANK set) or Slurm (SLURM_PROCID and SLURM_NTASKS
/// set) variables, else one worker without network (rank 0 of 1, chief). An empty variable counts as unset.
cluster_info resolve_cluster(const std::optional<simple_cluster_resolver>& explicit_cluster = {});

static_assert(cluster_resolver<simple_cluster_resolver> && cluster_resolver<tf_config_resolver> &&
              cluster_resolver<slurm_resolver> && cluster_resolver<master_resolver> &&
              cluster_resolver<torchrun_resolver> && cluster_resolver<mpi_resolver>);

// ---- implementation --------------------------------------------------------------------------------------

namespace detail {



/// A short excerpt of a possibly long text, for messages.
inline std::string excerpt(const std::string& s, std::size_t max = 200) {
  return s.size() <= max ? s : s.substr(0, max) + "...";
}

inline bool all_digits(const std::string& v) {
  return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
}

/// A non-negative int from a variable's value; `what` names the variable.
inline int parse_int(const std::string& v, const std::string& what) {
  if (!all_digits(v) || v.size() > 9)
    throw config_error(what + "=\"" + v + "\" is not a non-negative integer");
  return std::stoi(v);
}

/// A port (1..65535) from a variable's value.
inline std::uint16_t parse_port(const std::string& v, const std::string& what) {
  if (!all_digits(v) || v.size() > 5 || std::stoi(v) < 1 || std::stoi(v) > 65535)
    throw config_error(what + "=\"" + v + "\" is not a port (1..65535)");
  return static_cast<std::uint16_t>(std::stoi(v));
}

/// Host names, IPv4 and (inside brackets) IPv6 addresses with an optional %zone.
inline bool valid_host(const std::string& h, bool bracketed) {
  if (h.empty()) return false;
  if (!bracketed) {  // a name no resolver can ever accept is a configuration error, not a transient one:
    if (h.size() > 253) return false;  // RFC 1123, at most 253 characters in labels of 1..63
    std::size_t label = 0;
    for (const char c : h)
      if (c != '.' ? ++label > 63 : std::exchange(label, 0) == 0) return false;
  }
  return std::all_of(h.begin(), h.end(), [&](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_' || (bracketed && (c == ':' || c == '%'));
  });
}

inline const char* const known_jobs[] = {"chief", "worker", "ps", "evaluator"};

inline bool is_known_job(const std::string& job) {
  return std::find(std::begin(known_jobs), std::end(known_jobs), job) != std::end(known_jobs);
}

/// Ring order of a spec, as (job, index): the chief, then the workers in index order.
inline std::vector<std::pair<std::string, int>> ring_order(const cluster_spec& s) {
  std::vector<std::pair<std::string, int>> r;
  for (const char* job : {"chief", "worker"})
    if (auto it = s.jobs.find(job); it != s.jobs.end())
      for (std::size_t i = 0; i < it->second.size(); ++i) r.emplace_back(job, int(i));
  return r;
}

/// Expands one comma-free hostlist item, bracket group by bracket group.
inline void expand_host(const std::string& list, const std::string& prefix, const std::string& rest,
                        std::vector<std::string>& out) {
  constexpr std::size_t max_hosts = std::size_t(1) << 16;  // more nodes than any cluster has; bounds the work
  const auto open = rest.find('[');
  if (open == std::string::npos) {
    if (rest.find(']') != std::string::npos)
      throw config_error("Slurm hostlist \"" + list + "\": unmatched ] in \"" + prefix + rest + "\"");
    if (out.size() >= max_hosts) throw config_error("Slurm hostlist \"" + excerpt(list) + "\" expands to too many hosts");
    out.push_back(prefix + rest);
    return;
  }
  const auto close = rest.find(']', open);
  if (close == std::string::npos || rest.find('[', open + 1) < close || rest.substr(0, open).find(']') != std::string::npos)
    throw config_error("Slurm hostlist \"" + list + "\": unbalanced brackets in \"" + prefix + rest + "\"");
  const std::string head = prefix + rest.substr(0, open), ranges = rest.substr(open + 1, close - open - 1),
                    tail = rest.substr(close + 1);
  std::size_t k = 0;
  while (true) {
    const auto comma = std::min(ranges.find(',', k), ranges.size());
    const std::string r = ranges.substr(k, comma - k);
    const auto dash = r.find('-');
    const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9 || std::stol(hi) < std::stol(lo))
      throw config_error("Slurm hostlist \"" + list + "\": bad range \"" + r + "\" in \"[" + ranges + "]\"");
    for (long v = std::stol(lo); v <= std::stol(hi); ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');  // keep "01"'s width
      expand_host(list, head + n, tail, out);
    }
    if (comma == ranges.size()) break;
    k = comma + 1;
  }
}

}  // namespace detail

inline std::string endpoint::str() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

inline endpoint endpoint::parse(const std::string& s) {
  const auto bad = [&](const std::string& why) {
    const std::string shown = s.size() > 80 ? s.substr(0, 80) + "... (" + std::to_string(s.size()) + " characters)" : s;
    return config_error("bad address \"" + shown + "\": " + why);
  };
  std::string host, port;
  bool bracketed = false;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string::npos) throw bad("unclosed [ in the host");
    if (close + 1 >= s.size() || s[close + 1] != ':') throw bad("expected [v6 address]:port");
    host = s.substr(1, close - 1), port = s.substr(close + 2), bracketed = true;
  } else {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos) throw bad("expected host:port");
    host = s.substr(0, colon), port = s.substr(colon + 1);
    if (host.find(':') != std::string::npos) throw bad("write IPv6 hosts as [address]:port");
  }
  if (host.empty()) throw bad("the host is empty");
  if (!detail::valid_host(host, bracketed))
    throw bad("the host is not a host name or address (letters, digits, '.', '-', '_'; labels of at most 63 "
              "characters, 253 in all)");
  if (!detail::all_digits(port)) throw bad("port \"" + port + "\" is not a number");
  const int p = port.size() > 5 ? 0 : std::stoi(port);
  if (p < 1 || p > 65535) throw bad("port " + port + " is out of range 1..65535");
  return {host, static_cast<std::uint16_t>(p)};
}

inline std::uint64_t cluster_info::fingerprint() const {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a 64 offset basis
  const auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // a separator no address contains: "ab","c" != "a","bc"
  };
  mix(std::to_string(world_size));
  const auto order = detail::ring_order(spec);
  for (std::size_t r = 0; r < ring.size(); ++r) {
    mix(order.size() == ring.size() ? order[r].first : "worker");
    mix(ring[r].str());
  }
  if (ring.empty() && master) mix("master"), mix(master->str());
  return h;
}

inline cluster_info make_cluster_info(cluster_spec spec, const std::string& task_type, int task_id,
                                      const std::string& source) {
  const auto fail = [&](const std::string& what) { return config_error(source + ": " + what); };
  std::map<std::string, std::string> seen;  // normalised address -> "job[i]"
  for (const auto& [job, tasks] : spec.jobs) {
    if (!detail::is_known_job(job))
      throw fail("unknown job \"" + job + "\" in the cluster (jobs are chief, worker, ps, evaluator)");
    if (tasks.empty()) throw fail("job \"" + job + "\" lists no tasks (leave the job out instead)");
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const std::string where = job + "[" + std::to_string(i) + "]";
      endpoint e;
      try {
        e = endpoint::parse(tasks[i]);
      } catch (const config_error& x) {
        throw fail(where + ": " + x.what());
      }
      if (auto [it, fresh] = seen.emplace(e.str(), where); !fresh)
        throw fail("duplicate address \"" + tasks[i] + "\" for " + it->second + " and " + where);
    }
  }
  for (const char* job : {"chief", "evaluator"})
    if (auto it = spec.jobs.find(job); it != spec.jobs.end() && it->second.size() > 1)
      throw fail(std::string("there can be at most one ") + job + " task, the cluster lists " +
                 std::to_string(it->second.size()) + ": " + it->second[0] + ", " + it->second[1] +
                 (it->second.size() > 2 ? ", ..." : ""));
  const auto order = detail::ring_order(spec);
  if (order.empty()) throw fail("the cluster has no chief or worker task to train");
  if (!detail::is_known_job(task_type))
    throw fail("unknown task type \"" + task_type + "\" (task types are chief, worker, ps, evaluator)");
  const auto job = spec.jobs.find(task_type);
  if (job == spec.jobs.end() && task_type != "evaluator")  // TF lets the evaluator stay outside the spec
    throw fail("task type \"" + task_type + "\" is not a job of the cluster");
  const std::size_t tasks = job == spec.jobs.end() ? 1 : job->second.size();
  if (task_id < 0 || std::size_t(task_id) >= tasks)
    throw fail("task index " + std::to_string(task_id) + " is out of range for job \"" + task_type + "\" with " +
               std::to_string(tasks) + " task(s)");
  cluster_info c;
  c.task_type = task_type, c.task_id = task_id, c.source = source;
  c.world_size = int(order.size());
  c.rank = -1;
  for (std::size_t r = 0; r < order.size(); ++r) {
    c.ring.push_back(endpoint::parse(spec.jobs.at(order[r].first)[std::size_t(order[r].second)]));
    if (order[r].first == task_type && order[r].second == task_id) c.rank = int(r);
  }
  if (c.rank >= 0) {  // the members on this one's host, in rank order
    c.local_rank = 0, c.local_size = 0;
    for (std::size_t r = 0; r < c.ring.size(); ++r)
      if (c.ring[r].host == c.ring[std::size_t(c.rank)].host) {
        if (int(r) < c.rank) ++c.local_rank;
        ++c.local_size;
      }
  }
  c.spec = std::move(spec);
  return c;
}

inline tf_config_resolver tf_config_resolver::from_env() { return {environment::get("TF_CONFIG")}; }

inline cluster_info tf_config_resolver::resolve() const {
  using json = nlohmann::json;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    const std::size_t at = std::min(e.byte > 0 ? e.byte - 1 : 0, text.size());
    const std::size_t from = at > 30 ? at - 30 : 0;
    std::string why = e.what();  // "[json...] parse error at line 1, column 7: syntax error while ..."
    const auto col = why.find("column");
    why = col != std::string::npos && why.find(": ", col) != std::string::npos ? why.substr(why.find(": ", col) + 2) : "";
    throw config_error("TF_CONFIG is not valid JSON at byte " + std::to_string(e.byte) + ", near \"" +
                       (from > 0 ? "..." : "") + text.substr(from, at - from) + "<here>" + text.substr(at, 20) +
                       (at + 20 < text.size() ? "..." : "") + "\"" + (why.empty() ? "" : " (" + why + ")"));
  } catch (const json::exception& e) {  // a number out of range, say
    throw config_error("TF_CONFIG is not valid JSON: " + std::string(e.what()) + " in " + detail::excerpt(text));
  }
  if (!j.is_object()) throw config_error("TF_CONFIG must be a JSON object, got " + detail::excerpt(j.dump()));
  if (!j.contains("cluster")) throw config_error("TF_CONFIG has no \"cluster\": " + detail::excerpt(j.dump()));
  if (!j.contains("task")) throw config_error("TF_CONFIG has no \"task\": " + detail::excerpt(j.dump()));
  const json& cl = j["cluster"];
  const json& task = j["task"];
  if (!cl.is_object()) throw config_error("TF_CONFIG: \"cluster\" is not an object: " + detail::excerpt(cl.dump()));
  if (!task.is_object()) throw config_error("TF_CONFIG: \"task\" is not an object: " + detail::excerpt(task.dump()));
  cluster_spec spec;
  for (auto it = cl.begin(); it != cl.end(); ++it) {
    if (!it->is_array())
      throw config_error("TF_CONFIG: job \"" + it.key() + "\" is not a list of addresses: " + detail::excerpt(it->dump()));
    auto& tasks = spec.jobs[it.key()];
    for (const auto& a : *it) {
      if (!a.is_string())
        throw config_error("TF_CONFIG: job \"" + it.key() + "\" lists a non-string address " + detail::excerpt(a.dump()) +
                           " at index " + std::to_string(tasks.size()));
      tasks.push_back(a.get<std::string>());
    }
  }
  if (!task.contains("type") || !task["type"].is_string())
    throw config_error("TF_CONFIG: task has no string \"type\": " + detail::excerpt(task.dump()));
  if (!task.contains("index") || !task["index"].is_number_integer())
    throw config_error("TF_CONFIG: task has no integer \"index\": " + detail::excerpt(task.dump()));
  const json& index = task["index"];
  const bool fits = index.is_number_unsigned() ? index.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<int>::max())
                                               : index.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                                                     index.get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) throw config_error("TF_CONFIG: task index " + index.dump() + " is out of range");
  return make_cluster_info(std::move(spec), task["type"].get<std::string>(), index.get<int>(), "TF_CONFIG");
}

inline std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= list.size()) {
    std::size_t j = i;
    for (int depth = 0; j < list.size() && (list[j] != ',' || depth > 0); ++j)
      depth += list[j] == '[' ? 1 : list[j] == ']' ? -1 : 0;
    const std::string item = list.substr(i, j - i);
    if (item.empty()) throw config_error("Slurm hostlist \"" + list + "\": empty host name at byte " + std::to_string(i));
    detail::expand_host(list, "", item, out);
    i = j + 1;
  }
  return out;
}

inline std::vector<int> expand_tasks_per_node(const std::string& list) {
  std::vector<int> out;
  std::size_t i = 0;
  while (i <= list.size()) {
    const auto comma = std::min(list.find(',', i), list.size());
    const std::string item = list.substr(i, comma - i);
    const auto bad = [&] { return config_error("Slurm: bad tasks per node \"" + list + "\" at \"" + item + "\" (expected N or N(xM))"); };
    const auto x = item.find("(x");
    const std::string count = item.substr(0, x);
    if (!detail::all_digits(count) || count.size() > 6) throw bad();
    std::size_t times = 1;
    if (x != std::string::npos) {
      const std::string m = item.substr(x + 2, item.size() - x - 3);
      if (item.back() != ')' || !detail::all_digits(m) || m.size() > 6) throw bad();
      times = std::stoul(m);
    }
    if (times == 0 || out.size() + times > (std::size_t(1) << 20)) throw bad();
    out.insert(out.end(), times, std::stoi(count));
    i = comma + 1;
  }
  return out;
}

inline slurm_resolver slurm_resolver::from_env() {
  return {environment::get("SLURM_PROCID"),
          environment::get("SLURM_NTASKS"),
          environment::get_first({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}),
          environment::get_first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}),
          environment::get(environment::port),
          environment::get("SLURM_NODEID"),
          environment::get("SLURM_LOCALID")};
}

inline cluster_info slurm_resolver::resolve() const {
  const int rank = detail::parse_int(procid, "SLURM_PROCID"), n = detail::parse_int(ntasks, "SLURM_NTASKS");
  if (n < 1) throw config_error("Slurm: SLURM_NTASKS=\"" + ntasks + "\" must be at least 1");
  if (rank >= n) throw config_error("Slurm: SLURM_PROCID=" + procid + " is not below SLURM_NTASKS=" + ntasks);
  if (nodelist.empty()) throw config_error("Slurm: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
  const auto nodes = expand_hostlist(nodelist);
  for (std::set<std::string_view> seen; const auto& node : nodes)
    if (!seen.insert(node).second)
      throw config_error("Slurm: the nodelist \"" + detail::excerpt(nodelist) + "\" names node \"" + node + "\" twice");
  std::vector<int> per_node;
  if (tasks_per_node.empty()) {
    for (std::size_t k = 0; k < nodes.size(); ++k)
      per_node.push_back(n / int(nodes.size()) + (int(k) < n % int(nodes.size()) ? 1 : 0));
  } else {
    per_node = expand_tasks_per_node(tasks_per_node);
  }
  if (per_node.size() != nodes.size())
    throw config_error("Slurm: the tasks per node \"" + tasks_per_node + "\" describe " + std::to_string(per_node.size()) +
                       " node(s) but the nodelist \"" + nodelist + "\" has " + std::to_string(nodes.size()));
  long total = 0;
  for (int t : per_node) total += t;
  if (total != n)
    throw config_error("Slurm: the tasks per node \"" + tasks_per_node + "\" add up to " + std::to_string(total) +
                       " tasks but SLURM_NTASKS=" + ntasks);
  const int port = base_port.empty() ? 29500 : detail::parse_port(base_port, "Slurm: DTRAIN_PORT");
  const int most = *std::max_element(per_node.begin(), per_node.end());
  if (port + most - 1 > 65535)
    throw config_error("Slurm: DTRAIN_PORT=" + std::to_string(port) + " plus " + std::to_string(most) +
                       " tasks on one node runs past port 65535");
  cluster_info c;
  c.source = "Slurm", c.task_type = "worker", c.task_id = rank, c.rank = rank, c.world_size = n;
  auto& workers = c.spec.jobs["worker"];
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (int t = 0; t < per_node[k]; ++t) {
      if (int(c.ring.size()) == rank && !node_id.empty() && !local_id.empty() &&
          (detail::parse_int(node_id, "SLURM_NODEID") != int(k) || detail::parse_int(local_id, "SLURM_LOCALID") != t))
        throw config_error("Slurm: SLURM_PROCID=" + procid + " should be task " + std::to_string(t) + " of node " +
                           std::to_string(k) + " (" + nodes[k] + ") in block order, but SLURM_NODEID=" + node_id +
                           " and SLURM_LOCALID=" + local_id + " (run srun with --distribution=block)");
      if (int(c.ring.size()) == rank) c.local_rank = t, c.local_size = per_node[k];
      c.ring.push_back({nodes[k], static_cast<std::uint16_t>(port + t)});
      workers.push_back(c.ring.back().str());
    }
  return c;
}

inline cluster_info master_resolver::resolve() const {
  const bool torchrun = source == "torchrun";
  const int r = detail::parse_int(rank, torchrun ? "RANK" : source == "Open MPI" ? "OMPI_COMM_WORLD_RANK" : source + " rank");
  const int n = detail::parse_int(world_size, torchrun ? "WORLD_SIZE" : source == "Open MPI" ? "OMPI_COMM_WORLD_SIZE" : source + " world size");
  if (n < 1) throw config_error(source + ": world size \"" + world_size + "\" must be at least 1");
  if (r >= n) throw config_error(source + ": rank " + rank + " is not below world size " + world_size);
  const std::string addr_var = torchrun ? "MASTER_ADDR" : "DTRAIN_MASTER_ADDR or MASTER_ADDR";
  if (n > 1 && master_addr.empty()) throw config_error(source + ": rank 0's address is not set (" + addr_var + ")");
  cluster_info c;
  c.source = source, c.task_type = "worker", c.task_id = r, c.rank = r, c.world_size = n;
  if (!local_rank.empty() || !local_size.empty()) {
    const std::string lr_var = torchrun ? "LOCAL_RANK" : source == "Open MPI" ? "OMPI_COMM_WORLD_LOCAL_RANK" : source + " local rank";
    const std::string ls_var = torchrun ? "LOCAL_WORLD_SIZE" : source == "Open MPI" ? "OMPI_COMM_WORLD_LOCAL_SIZE" : source + " local size";
    if (local_rank.empty() || local_size.empty())
      throw config_error(source + ": " + (local_rank.empty() ? lr_var + " is not set but " + ls_var + " is"
                                                             : ls_var + " is not set but " + lr_var + " is"));
    c.local_rank = detail::parse_int(local_rank, lr_var), c.local_size = detail::parse_int(local_size, ls_var);
    if (c.local_size < 1 || c.local_size > n || c.local_rank >= c.local_size)
      throw config_error(source + ": " + lr_var + "=" + local_rank + " and " + ls_var + "=" + local_size +
                         " do not fit (the local rank must be below the local size, which must be 1 to " +
                         std::to_string(n) + ")");
  }
  if (!master_addr.empty()) {
    // MASTER_ADDR is a bare host: an IPv6 address comes without brackets, or with them.
    const bool bracketed = master_addr.front() == '[' && master_addr.back() == ']';
    const std::string host = bracketed ? master_addr.substr(1, master_addr.size() - 2) : master_addr;
    if (!detail::valid_host(host, true))
      throw config_error(source + ": " + addr_var + "=\"" + master_addr + "\" is not a host name or address");
    if (!bracketed && std::count(host.begin(), host.end(), ':') == 1)  // IPv6 has at least two
      throw config_error(source + ": " + addr_var + "=\"" + master_addr + "\" looks like host:port; give the port in " +
                         (torchrun ? "MASTER_PORT" : "DTRAIN_MASTER_PORT or MASTER_PORT"));
    c.master = endpoint{host, master_port.empty() ? std::uint16_t(29500)
                                                  : detail::parse_port(master_port, torchrun ? "MASTER_PORT" : "DTRAIN_MASTER_PORT or MASTER_PORT")};
  }
  return c;
}

inline torchrun_resolver torchrun_resolver::from_env() {
  return {environment::get("RANK"),        environment::get("WORLD_SIZE"),      environment::get("MASTER_ADDR"),
          environment::get("MASTER_PORT"), environment::get("LOCAL_RANK"), environment::get("LOCAL_WORLD_SIZE")};
}

inline mpi_resolver mpi_resolver::from_env() {
  return {environment::get("OMPI_COMM_WORLD_RANK"),
          environment::get("OMPI_COMM_WORLD_SIZE"),
          environment::get_first({environment::master_addr, "MASTER_ADDR"}),
          environment::get_first({environment::master_port, "MASTER_PORT"}),
          environment::get("OMPI_COMM_WORLD_LOCAL_RANK"),
          environment::get("OMPI_COMM_WORLD_LOCAL_SIZE")};
}

inline cluster_info resolve_cluster(const std::optional<simple_cluster_resolver>& explicit_cluster) {
  auto env = environment::get;
  if (explicit_cluster) return explicit_cluster->resolve();
  if (!env("TF_CONFIG").empty()) return tf_config_resolver::from_env().resolve();
  if (!env("RANK").empty() && !env("WORLD_SIZE").empty()) return torchrun_resolver::from_env().resolve();
  if (!env("OMPI_COMM_WORLD_RANK").empty()) return mpi_resolver::from_env().resolve();
  if (!env("SLURM_PROCID").empty() && !env("SLURM_NTASKS").empty()) return slurm_resolver::from_env().resolve();
  return {};
}

/// A communicator that joins a cluster of processes through `Comm::connect(cluster, options)` (its
/// contract is in comm/communicator.hpp): what `multi_worker_mirrored_strategy<Comm>` takes.
template <class C>
concept cluster_communicator = communicator<C> && requires(const cluster_info& c, const communication_options& o) {
  { C::connect(c, o) } -> std::same_as<C>;
};
static_assert(cluster_communicator<comm::local>);

}  // namespace dtrain
