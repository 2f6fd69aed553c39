#pragma once
/// \file
/// Cluster resolution: which workers take part, in what order, and who this process is. As TF:
/// TF_CONFIG's jobs `chief`, `worker`, `ps`, `evaluator` and its `task`; the chief is the `chief` task
/// when there is one, else worker 0; ring ranks are the chief then the workers in index order; the
/// evaluator and ps tasks are not in the ring. Other launchers are read too (Slurm, torchrun, Open MPI),
/// an explicit spec in code always wins, and nothing set means one worker without network.
///
/// Resolver contract (`cluster_resolver`): `resolve()` returns a `cluster_info` whose `rank` is in
/// [0, world_size) for ring members (-1 otherwise), whose `ring` lists every member's endpoint in rank
/// order or is empty when only `master` (rank 0's address) is known; malformed input throws a
/// `config_error` that quotes the offending part.

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// host:port of a task.
struct endpoint {
  std::string host;
  std::uint16_t port = 0;

  std::string str() const { return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port); }
  friend bool operator==(const endpoint&, const endpoint&) = default;

  /// Parses "host:port" or "[v6 address]:port".
  static endpoint parse(const std::string& s) {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
      throw config_error("bad address \"" + s + "\": expected host:port");
    std::string host = s.substr(0, colon);
    if (host.front() == '[') {
      if (host.size() < 3 || host.back() != ']') throw config_error("bad address \"" + s + "\": unclosed [ in host");
      host = host.substr(1, host.size() - 2);
    } else if (host.find(':') != std::string::npos) {
      throw config_error("bad address \"" + s + "\": write IPv6 hosts as [address]:port");
    }
    const std::string p = s.substr(colon + 1);
    if (p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5)
      throw config_error("bad address \"" + s + "\": port \"" + p + "\" is not a number");
    const long port = std::stol(p);
    if (port < 1 || port > 65535) throw config_error("bad address \"" + s + "\": port " + p + " is out of range");
    return {host, static_cast<std::uint16_t>(port)};
  }
};

/// `tf.train.ClusterSpec`: job name -> task addresses.
struct cluster_spec {
  std::map<std::string, std::vector<std::string>> jobs;
};

/// The resolved view of the cluster for this process.
struct cluster_info {
  cluster_spec spec{};
  std::string task_type = "worker";
  int task_id = 0;
  int rank = 0;        // in the all-reduce ring; -1 for evaluator and ps tasks
  int world_size = 1;  // ring members
  std::vector<endpoint> ring{};        // every member's address in rank order, or empty
  std::optional<endpoint> master{};    // rank 0's address when `ring` is not known
  std::string source = "single";       // where it came from: explicit, TF_CONFIG, Slurm, torchrun, MPI, single

  bool in_ring() const { return rank >= 0; }
  bool is_chief() const { return rank == 0; }
  /// A stable hash of the ring's membership (FNV-1a over world size and addresses), which the handshake
  /// compares so workers of another job are refused.
  std::uint64_t fingerprint() const {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&](const std::string& s) {
      for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
      h = (h ^ 0xff) * 1099511628211ull;
    };
    mix(std::to_string(world_size));
    for (const auto& e : ring) mix(e.str());
    if (ring.empty() && master) mix(master->str());
    return h;
  }
};

template <class R>
concept cluster_resolver = requires(const R& r) {
  { r.resolve() } -> std::same_as<cluster_info>;
};

namespace detail {
inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
inline int parse_int(const std::string& v, const char* what) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9)
    throw config_error(std::string(what) + "=\"" + v + "\" is not a non-negative integer");
  return std::stoi(v);
}
/// Ring order of a spec: chief first, then the workers.
inline std::vector<std::pair<std::string, int>> ring_order(const cluster_spec& s) {
  std::vector<std::pair<std::string, int>> r;
  for (const char* job : {"chief", "worker"})
    if (auto it = s.jobs.find(job); it != s.jobs.end())
      for (std::size_t i = 0; i < it->second.size(); ++i) r.emplace_back(job, int(i));
  return r;
}
}  // namespace detail

/// Resolves an explicit spec and task (what TF_CONFIG says, given in code).
inline cluster_info make_cluster_info(cluster_spec spec, const std::string& task_type, int task_id,
                                      const std::string& source = "explicit") {
  static const char* known[] = {"chief", "worker", "ps", "evaluator"};
  std::map<std::string, std::string> seen;  // address -> where
  for (const auto& [job, tasks] : spec.jobs) {
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return job == k; }) == std::end(known))
      throw config_error(source + ": unknown job \"" + job + "\" in the cluster (jobs are chief, worker, ps, evaluator)");
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      endpoint::parse(tasks[i]);
      const std::string where = job + "[" + std::to_string(i) + "]";
      auto [it, fresh] = seen.emplace(tasks[i], where);
      if (!fresh)
        throw config_error(source + ": duplicate address \"" + tasks[i] + "\" for " + it->second + " and " + where);
    }
  }
  if (auto c = spec.jobs.find("chief"); c != spec.jobs.end() && c->second.size() > 1)
    throw config_error(source + ": there can be only one chief, the cluster lists " + std::to_string(c->second.size()));
  const auto order = detail::ring_order(spec);
  if (order.empty()) throw config_error(source + ": the cluster has no chief or worker task");
  auto job = spec.jobs.find(task_type);
  if (job == spec.jobs.end())
    throw config_error(source + ": task type \"" + task_type + "\" is not a job of the cluster");
  if (task_id < 0 || std::size_t(task_id) >= job->second.size())
    throw config_error(source + ": task index " + std::to_string(task_id) + " is out of range for job \"" + task_type +
                       "\" with " + std::to_string(job->second.size()) + " task(s)");
  cluster_info c;
  c.task_type = task_type, c.task_id = task_id, c.source = source;
  c.world_size = int(order.size());
  c.rank = -1;
  for (std::size_t r = 0; r < order.size(); ++r) {
    c.ring.push_back(endpoint::parse(spec.jobs.at(order[r].first)[std::size_t(order[r].second)]));
    if (order[r].first == task_type && order[r].second == task_id) c.rank = int(r);
  }
  c.spec = std::move(spec);
  return c;
}

/// TF_CONFIG, as the seeds describe it.
struct tf_config_resolver {
  std::string text;  // the JSON; from_env() reads the variable
  static tf_config_resolver from_env() { return {detail::env("TF_CONFIG")}; }

  cluster_info resolve() const {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
      const std::size_t from = at > 20 ? at - 20 : 0;
      throw config_error("TF_CONFIG is not valid JSON at byte " + std::to_string(e.byte) + ": \"..." +
                         text.substr(from, 40) + "...\"");
    }
    if (!j.is_object()) throw config_error("TF_CONFIG must be a JSON object, got " + j.dump());
    if (!j.contains("cluster") || !j["cluster"].is_object())
      throw config_error("TF_CONFIG has no \"cluster\" object: " + j.dump());
    if (!j.contains("task") || !j["task"].is_object())
      throw config_error("TF_CONFIG has no \"task\" object: " + j.dump());
    cluster_spec spec;
    for (auto it = j["cluster"].begin(); it != j["cluster"].end(); ++it) {
      if (!it->is_array()) throw config_error("TF_CONFIG: job \"" + it.key() + "\" is not a list: " + it->dump());
      auto& tasks = spec.jobs[it.key()];
      for (const auto& a : *it) {
        if (!a.is_string()) throw config_error("TF_CONFIG: job \"" + it.key() + "\" lists a non-string address " + a.dump());
        tasks.push_back(a.get<std::string>());
      }
    }
    const auto& task = j["task"];
    if (!task.contains("type") || !task["type"].is_string())
      throw config_error("TF_CONFIG: task has no string \"type\": " + task.dump());
    if (!task.contains("index") || !task["index"].is_number_integer())
      throw config_error("TF_CONFIG: task has no integer \"index\": " + task.dump());
    return make_cluster_info(std::move(spec), task["type"].get<std::string>(), task["index"].get<int>(), "TF_CONFIG");
  }
};

/// Expands a Slurm hostlist: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5.
inline std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < list.size()) {
    std::size_t j = i;
    int depth = 0;
    while (j < list.size() && (list[j] != ',' || depth > 0)) depth += list[j] == '[' ? 1 : list[j] == ']' ? -1 : 0, ++j;
    const std::string item = list.substr(i, j - i);
    i = j + 1;
    if (item.empty()) continue;
    const auto open = item.find('[');
    if (open == std::string::npos) {
      out.push_back(item);
      continue;
    }
    const auto close = item.find(']', open);
    if (close == std::string::npos) throw config_error("Slurm hostlist \"" + list + "\": unclosed [ in \"" + item + "\"");
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1), ranges = item.substr(open + 1, close - open - 1);
    std::size_t k = 0;
    while (k <= ranges.size()) {
      auto comma = ranges.find(',', k);
      if (comma == std::string::npos) comma = ranges.size();
      const std::string r = ranges.substr(k, comma - k);
      k = comma + 1;
      const auto dash = r.find('-');
      const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
      if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
          hi.find_first_not_of("0123456789") != std::string::npos)
        throw config_error("Slurm hostlist \"" + list + "\": bad range \"" + r + "\"");
      const long a = std::stol(lo), b = std::stol(hi);
      if (b < a || b - a > 100000) throw config_error("Slurm hostlist \"" + list + "\": bad range \"" + r + "\"");
      for (long v = a; v <= b; ++v) {
        std::string n = std::to_string(v);
        if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
        out.push_back(prefix + n + suffix);
      }
      if (comma == ranges.size()) break;
    }
  }
  return out;
}

/// Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) and
/// SLURM_STEP_TASKS_PER_NODE ("2(x3),1"); a task's port is DTRAIN_PORT (default 29500) plus its index on its node.
struct slurm_resolver {
  std::string procid, ntasks, nodelist, tasks_per_node, base_port;
  static slurm_resolver from_env() {
    std::string nodes = detail::env("SLURM_STEP_NODELIST");
    if (nodes.empty()) nodes = detail::env("SLURM_JOB_NODELIST");
    std::string tpn = detail::env("SLURM_STEP_TASKS_PER_NODE");
    if (tpn.empty()) tpn = detail::env("SLURM_TASKS_PER_NODE");
    return {detail::env("SLURM_PROCID"), detail::env("SLURM_NTASKS"), nodes, tpn, detail::env("DTRAIN_PORT")};
  }
  cluster_info resolve() const {
    const int rank = detail::parse_int(procid, "SLURM_PROCID"), n = detail::parse_int(ntasks, "SLURM_NTASKS");
    if (n < 1 || rank >= n) throw config_error("Slurm: SLURM_PROCID=" + procid + " is not below SLURM_NTASKS=" + ntasks);
    const auto nodes = expand_hostlist(nodelist);
    if (nodes.empty()) throw config_error("Slurm: SLURM_STEP_NODELIST is empty");
    std::vector<int> per_node;
    if (tasks_per_node.empty()) {
      per_node.assign(nodes.size(), 0);
      for (int t = 0; t < n; ++t) ++per_node[std::size_t(t) % nodes.size()];  // Slurm's default is block; see docs
    } else {
      std::size_t i = 0;
      while (i < tasks_per_node.size()) {
        auto comma = tasks_per_node.find(',', i);
        if (comma == std::string::npos) comma = tasks_per_node.size();
        const std::string item = tasks_per_node.substr(i, comma - i);
        i = comma + 1;
        const auto x = item.find("(x");
        const int count = detail::parse_int(item.substr(0, x), "SLURM_STEP_TASKS_PER_NODE");
        int times = 1;
        if (x != std::string::npos) {
          if (item.back() != ')') throw config_error("Slurm: bad SLURM_STEP_TASKS_PER_NODE \"" + tasks_per_node + "\"");
          times = detail::parse_int(item.substr(x + 2, item.size() - x - 3), "SLURM_STEP_TASKS_PER_NODE");
        }
        per_node.insert(per_node.end(), std::size_t(times), count);
      }
    }
    if (per_node.size() != nodes.size())
      throw config_error("Slurm: SLURM_STEP_TASKS_PER_NODE \"" + tasks_per_node + "\" describes " +
                         std::to_string(per_node.size()) + " nodes but the nodelist \"" + nodelist + "\" has " +
                         std::to_string(nodes.size()));
    const int port = base_port.empty() ? 29500 : detail::parse_int(base_port, "DTRAIN_PORT");
    cluster_info c;
    c.source = "Slurm", c.task_type = "worker", c.task_id = rank, c.rank = rank, c.world_size = n;
    for (std::size_t k = 0; k < nodes.size(); ++k)
      for (int t = 0; t < per_node[k]; ++t) {
        c.ring.push_back({nodes[k], static_cast<std::uint16_t>(port + t)});
        c.spec.jobs["worker"].push_back(c.ring.back().str());
      }
    if (int(c.ring.size()) != n)
      throw config_error("Slurm: the nodes hold " + std::to_string(c.ring.size()) + " tasks but SLURM_NTASKS=" + ntasks);
    return c;
  }
};

/// torchrun / Open MPI style: a rank, a world size and rank 0's address; rank 0 hands out the ring's
/// addresses at the rendezvous.
struct master_resolver {
  std::string rank, world_size, master_addr, master_port, source;
  static master_resolver torchrun_from_env() {
    return {detail::env("RANK"), detail::env("WORLD_SIZE"), detail::env("MASTER_ADDR"), detail::env("MASTER_PORT"), "torchrun"};
  }
  static master_resolver mpi_from_env() {
    std::string addr = detail::env("DTRAIN_MASTER_ADDR");
    if (addr.empty()) addr = detail::env("MASTER_ADDR");
    std::string port = detail::env("DTRAIN_MASTER_PORT");
    if (port.empty()) port = detail::env("MASTER_PORT");
    return {detail::env("OMPI_COMM_WORLD_RANK"), detail::env("OMPI_COMM_WORLD_SIZE"), addr, port, "Open MPI"};
  }
  cluster_info resolve() const {
    const int r = detail::parse_int(rank, (source == "torchrun" ? "RANK" : "OMPI_COMM_WORLD_RANK"));
    const int n = detail::parse_int(world_size, (source == "torchrun" ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE"));
    if (n < 1 || r >= n) throw config_error(source + ": rank " + rank + " is not below world size " + world_size);
    if (n > 1 && master_addr.empty())
      throw config_error(source + ": rank 0's address is not set (MASTER_ADDR" +
                         std::string(source == "torchrun" ? "" : " or DTRAIN_MASTER_ADDR") + ")");
    cluster_info c;
    c.source = source, c.task_type = "worker", c.task_id = r, c.rank = r, c.world_size = n;
    if (n > 1) c.master = endpoint::parse(master_addr + ":" + (master_port.empty() ? "29500" : master_port));
    return c;
  }
};

/// The cluster this process belongs to: `explicit_spec` if given, else TF_CONFIG, Slurm, torchrun or
/// Open MPI variables (first found), else one worker without network.
inline cluster_info resolve_cluster(const std::optional<std::pair<cluster_spec, std::pair<std::string, int>>>& explicit_spec = {}) {
  if (explicit_spec)
    return make_cluster_info(explicit_spec->first, explicit_spec->second.first, explicit_spec->second.second);
  if (!detail::env("TF_CONFIG").empty()) return tf_config_resolver::from_env().resolve();
  if (!detail::env("SLURM_PROCID").empty() && !detail::env("SLURM_NTASKS").empty()) return slurm_resolver::from_env().resolve();
  if (!detail::env("RANK").empty() && !detail::env("WORLD_SIZE").empty()) return master_resolver::torchrun_from_env().resolve();
  if (!detail::env("OMPI_COMM_WORLD_RANK").empty()) return master_resolver::mpi_from_env().resolve();
  return {};
}

static_assert(cluster_resolver<tf_config_resolver> && cluster_resolver<slurm_resolver> && cluster_resolver<master_resolver>);

}  // namespace dtrain
