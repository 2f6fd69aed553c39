// Cluster resolution without any network: TF_CONFIG (good and malformed), ring order and the chief,
// the fingerprint, Slurm hostlists, the Slurm / torchrun / Open MPI variables and which source wins.
#include "support/gradcheck.hpp"

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <dtrain/distribute/cluster.hpp>

#include "support/helpers.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;
using dtrain_test::error_of;

namespace {

/// Clears every variable a resolver reads for the test's lifetime and restores the old values after,
/// so tests neither see the machine's launcher (a CI job under Slurm) nor leak into each other.
class scoped_env {
 public:
  scoped_env() {
    for (const char* n : names) {
      const char* v = std::getenv(n);
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
  }
  scoped_env(const scoped_env&) = delete;
  ~scoped_env() {
    for (const auto& [n, v] : saved_) v ? ::setenv(n, v->c_str(), 1) : ::unsetenv(n);
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [n, v] : vars) ::setenv(n, v, 1);
  }

  static constexpr const char* names[] = {
      "TF_CONFIG",          "SLURM_PROCID",         "SLURM_NTASKS",          "SLURM_STEP_NODELIST",
      "SLURM_JOB_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
      "SLURM_LOCALID",      "DTRAIN_PORT",          "RANK",                  "WORLD_SIZE",
      "MASTER_ADDR",        "MASTER_PORT",          "OMPI_COMM_WORLD_RANK",  "OMPI_COMM_WORLD_SIZE",
      "DTRAIN_MASTER_ADDR", "DTRAIN_MASTER_PORT",   "LOCAL_RANK",            "LOCAL_WORLD_SIZE",
      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

std::vector<std::string> strs(const std::vector<endpoint>& ring) {
  std::vector<std::string> out;
  for (const auto& e : ring) out.push_back(e.str());
  return out;
}

cluster_info tf(const std::string& cluster, const std::string& type, int index) {
  return tf_config_resolver{R"({"cluster": )" + cluster + R"(, "task": {"type": ")" + type +
                            R"(", "index": )" + std::to_string(index) + "}}"}
      .resolve();
}

/// A minimal type modelling the seam: a fixed answer (what a test of a strategy would hand in).
struct fixed_resolver {
  cluster_info info;
  cluster_info resolve() const { return info; }
};
static_assert(cluster_resolver<fixed_resolver>);
static_assert(!cluster_resolver<endpoint>);

}  // namespace

BOOST_AUTO_TEST_SUITE(cluster)

BOOST_AUTO_TEST_CASE(endpoint_parse_and_print) {
  const std::pair<std::string, endpoint> good[] = {
      {"localhost:12345", {"localhost", 12345}},
      {"10.0.0.1:1", {"10.0.0.1", 1}},
      {"host-a.example.com:65535", {"host-a.example.com", 65535}},
      {"[::1]:2222", {"::1", 2222}},
      {"[fe80::1%eth0]:80", {"fe80::1%eth0", 80}},
  };
  for (const auto& [text, want] : good) {
    BOOST_TEST_CONTEXT(text) {
      const auto e = endpoint::parse(text);
      BOOST_TEST(e.host == want.host);
      BOOST_TEST(e.port == want.port);
      BOOST_TEST(e.str() == text);  // prints back the same, brackets included
    }
  }
  BOOST_TEST(endpoint::parse("h:080").str() == "h:80");
  // each message quotes the whole string and says what is wrong with it
  const std::pair<std::string, std::string> bad[] = {
      {"nohost", "expected host:port"},
      {":80", "the host is empty"},
      {"h:", "is not a number"},
      {"h:0", "out of range"},
      {"h:65536", "out of range"},
      {"h:123456", "port 123456 is out of range 1..65535"},
      {"h:99999999999999999999", "port 99999999999999999999 is out of range 1..65535"},
      {"h:8x", "is not a number"},
      {"h:-1", "is not a number"},
      {"::1:80", "write IPv6 hosts as [address]:port"},
      {"[::1:80", "unclosed ["},
      {"[::1]80", "expected [v6 address]:port"},
      {"[]:80", "the host is empty"},
      {"a b:80", "is not a host name"},
      {"", "expected host:port"},
  };
  for (const auto& [text, expect] : bad) {
    const auto msg = error_of([&] { endpoint::parse(text); });
    BOOST_TEST(msg.find("\"" + text + "\"") != std::string::npos, msg << " does not quote " << text);
    BOOST_TEST(msg.find(expect) != std::string::npos, msg << " lacks " << expect);
  }
  // hostile host names: names no resolver accepts are configuration errors (exit 1), not transient (138): 100 kB
  // of letters, a label over 63 characters, an empty label; the message quotes only the start
  const std::string huge(100'000, 'a');
  const auto msg = error_of([&] { endpoint::parse(huge + ":80"); });
  BOOST_TEST(msg.find("is not a host name") != std::string::npos, msg.substr(0, 200));
  BOOST_TEST(msg.find("(100003 characters)") != std::string::npos, msg.substr(0, 200));
  BOOST_TEST(msg.size() < 300u);
  BOOST_CHECK_THROW(endpoint::parse(std::string(64, 'b') + ".example:80"), config_error);
  BOOST_CHECK_THROW(endpoint::parse("a..b:80"), config_error);
  BOOST_TEST(endpoint::parse(std::string(63, 'b') + ".example.:80").port == 80);  // a full name with its root dot
  BOOST_TEST(endpoint::parse("10.0.0.1:80").host == "10.0.0.1");
}

BOOST_AUTO_TEST_CASE(tf_config_good) {
  struct row {
    std::string json;
    int rank, world_size;
    bool chief;
    std::vector<std::string> ring;
  };
  const row rows[] = {
      // the multi-worker tutorial's two local workers: worker 0 is the chief
      {R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}})",
       0, 2, true, {"localhost:12345", "localhost:23456"}},
      {R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 1}})",
       1, 2, false, {"localhost:12345", "localhost:23456"}},
      // TF's distributed-training guide's example with ps tasks: parsed, not in the ring
      {R"({"cluster": {"worker": ["host1:1", "host2:2", "host3:3"], "ps": ["host4:4", "host5:5"]},
           "task": {"type": "worker", "index": 1}})",
       1, 3, false, {"host1:1", "host2:2", "host3:3"}},
      {R"({"cluster": {"worker": ["host1:1", "host2:2", "host3:3"], "ps": ["host4:4", "host5:5"]},
           "task": {"type": "ps", "index": 1}})",
       -1, 3, false, {"host1:1", "host2:2", "host3:3"}},
      // a chief job comes first, written before or after the workers
      {R"({"task": {"type": "chief", "index": 0}, "cluster": {"worker": ["w0:2"], "chief": ["c:1"]}})",
       0, 2, true, {"c:1", "w0:2"}},
      {R"({"cluster": {"chief": ["c:1"]}, "task": {"type": "chief", "index": 0}})", 0, 1, true, {"c:1"}},
      // IPv6, extra top-level keys (Kubeflow's "environment") ignored
      {R"({"cluster": {"worker": ["[::1]:5000", "[::1]:5001"]}, "task": {"type": "worker", "index": 1},
           "environment": "cloud", "rpc_layer": "grpc"})",
       1, 2, false, {"[::1]:5000", "[::1]:5001"}},
      // TF lets the evaluator stay outside the cluster
      {R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "evaluator", "index": 0}})", -1, 1, false, {"w:1"}},
  };
  for (const auto& r : rows) {
    BOOST_TEST_CONTEXT(r.json) {
      const auto c = tf_config_resolver{r.json}.resolve();
      BOOST_TEST(c.source == "TF_CONFIG");
      BOOST_TEST(c.rank == r.rank);
      BOOST_TEST(c.world_size == r.world_size);
      BOOST_TEST(c.is_chief() == r.chief);
      BOOST_TEST(c.in_ring() == (r.rank >= 0));
      BOOST_TEST(strs(c.ring) == r.ring, tt::per_element());
      BOOST_TEST(!c.master);
    }
  }
}

BOOST_AUTO_TEST_CASE(tf_config_bad_quotes_the_offending_part) {
  const std::string task = R"(, "task": {"type": "worker", "index": 0}})";
  const std::pair<std::string, std::vector<std::string>> bad[] = {
      // JSON: the byte offset and the text near it
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0})", {"not valid JSON", "at byte 72", "\"index\": 0}<here>"}},
      {R"({"cluster": {"worker": ['a:1']}})", {"not valid JSON", "at byte 25", "{\"worker\": [<here>'a:1']"}},
      {"", {"not valid JSON"}},
      {"4e601", {"not valid JSON", "number overflow"}},  // found by fuzzing: escaped as nlohmann's out_of_range
      {R"(["a:1"])", {"must be a JSON object", "[\"a:1\"]"}},
      // missing parts
      {R"({"task": {"type": "worker", "index": 0}})", {"no \"cluster\""}},
      {R"({"cluster": {"worker": ["a:1"]}})", {"no \"task\"", "\"worker\""}},
      {R"({"cluster": ["a:1"])" + task, {"\"cluster\" is not an object", "[\"a:1\"]"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": "worker"})", {"\"task\" is not an object", "\"worker\""}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}})", {"no string \"type\"", "{\"index\":0}"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})", {"no integer \"index\"", "{\"type\":\"worker\"}"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}})", {"no integer \"index\""}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1.5}})", {"no integer \"index\""}},
      // the task does not fit the cluster
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}})", {"task type \"chief\" is not a job"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "boss", "index": 0}})", {"unknown task type \"boss\""}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})", {"task index 3 is out of range", "\"worker\" with 1 task"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})", {"task index -1 is out of range"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 99999999999}})", {"task index 99999999999 is out of range"}},
      // the cluster itself
      {R"({"cluster": {"worker": ["a:1"], "boss": ["b:2"]})" + task, {"unknown job \"boss\""}},
      {R"({"cluster": {"worker": ["a:1", "b:2", "a:1"]})" + task, {"duplicate address \"a:1\"", "worker[0] and worker[2]"}},
      {R"({"cluster": {"chief": ["a:1"], "worker": ["a:01"]})" + task, {"duplicate address \"a:01\"", "chief[0] and worker[0]"}},
      {R"({"cluster": {"worker": ["a:1", "nohost"]})" + task, {"worker[1]", "\"nohost\""}},
      {R"({"cluster": {"worker": ["a:99999"]})" + task, {"worker[0]", "\"a:99999\""}},
      {R"({"cluster": {"worker": ["a:1"], "ps": ["p:x"]})" + task, {"ps[0]", "\"p:x\""}},
      {R"({"cluster": {"worker": [7]})" + task, {"job \"worker\" lists a non-string address 7 at index 0"}},
      {R"({"cluster": {"worker": ["a:1", {"host": "b"}]})" + task, {"non-string address {\"host\":\"b\"} at index 1"}},
      {R"({"cluster": {"worker": "a:1"})" + task, {"job \"worker\" is not a list", "\"a:1\""}},
      {R"({"cluster": {"chief": ["c:1", "c:2"], "worker": ["a:1"]})" + task, {"at most one chief", "lists 2", "c:1, c:2"}},
      {R"({"cluster": {"evaluator": ["e:1", "e:2"], "worker": ["a:1"]})" + task, {"at most one evaluator", "e:1, e:2"}},
      {R"({"cluster": {"worker": []})" + task, {"job \"worker\" lists no tasks"}},
      {R"({"cluster": {"chief": ["c:1"], "worker": []}, "task": {"type": "chief", "index": 0}})", {"job \"worker\" lists no tasks"}},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})", {"no chief or worker task"}},
      {R"({"cluster": {})" + task, {"no chief or worker task"}},
  };
  for (const auto& [text, expect] : bad) {
    const auto msg = error_of([&] { tf_config_resolver{text}.resolve(); });
    BOOST_TEST_CONTEXT(text) {
      BOOST_TEST(msg.rfind("TF_CONFIG", 0) == 0, msg << " does not start with TF_CONFIG");
      for (const auto& e : expect) BOOST_TEST(msg.find(e) != std::string::npos, msg << " lacks " << e);
    }
  }
  // config_error is a dtrain::error: one catch covers it
  BOOST_CHECK_THROW(tf_config_resolver{"{"}.resolve(), config_error);
  BOOST_CHECK_THROW(tf_config_resolver{"{"}.resolve(), dtrain::error);
}

BOOST_AUTO_TEST_CASE(chief_first_then_workers_in_index_order) {
  const std::string cl = R"({"chief": ["c:1"], "worker": ["w0:10", "w1:11", "w2:12"], "ps": ["p:3"], "evaluator": ["e:4"]})";
  const std::vector<std::string> ring = {"c:1", "w0:10", "w1:11", "w2:12"};
  BOOST_TEST(tf(cl, "chief", 0).rank == 0);
  for (int i = 0; i < 3; ++i) {
    const auto c = tf(cl, "worker", i);
    BOOST_TEST(c.rank == i + 1);
    BOOST_TEST(c.world_size == 4);
    BOOST_TEST(c.task_type == "worker");
    BOOST_TEST(c.task_id == i);
    BOOST_TEST(strs(c.ring) == ring, tt::per_element());
    // appended, not "w" + std::to_string(i): GCC 12 warns falsely about that (-Wstringop-overflow)
    const std::string expected = std::string("w").append(std::to_string(i)).append(":1").append(std::to_string(i));
    BOOST_TEST(c.ring[std::size_t(c.rank)].str() == expected);
  }
}

BOOST_AUTO_TEST_CASE(evaluator_and_ps_are_not_ring_members) {
  const std::string cl = R"({"chief": ["c:1"], "worker": ["w0:10"], "ps": ["p0:3", "p1:5"], "evaluator": ["e:4"]})";
  for (const auto& [type, index] : {std::pair<std::string, int>{"evaluator", 0}, {"ps", 0}, {"ps", 1}}) {
    const auto c = tf(cl, type, index);
    BOOST_TEST(!c.in_ring());
    BOOST_TEST(c.rank == -1);
    BOOST_TEST(!c.is_chief());
    BOOST_TEST(c.world_size == 2);  // chief and worker only
    BOOST_TEST(c.task_type == type);
    BOOST_TEST(c.task_id == index);
    BOOST_TEST(c.spec.jobs.at("ps").size() == 2u);  // parsed and kept
  }
}

BOOST_AUTO_TEST_CASE(is_chief_with_and_without_a_chief_job) {
  const std::string with = R"({"chief": ["c:1"], "worker": ["w0:2", "w1:3"]})";
  const std::string without = R"({"worker": ["w0:2", "w1:3"]})";
  BOOST_TEST(tf(with, "chief", 0).is_chief());
  BOOST_TEST(!tf(with, "worker", 0).is_chief());  // worker 0 is not the chief when a chief job exists
  BOOST_TEST(!tf(with, "worker", 1).is_chief());
  BOOST_TEST(tf(without, "worker", 0).is_chief());
  BOOST_TEST(!tf(without, "worker", 1).is_chief());
  BOOST_TEST(cluster_info{}.is_chief());  // no cluster at all: the single worker
}

BOOST_AUTO_TEST_CASE(fingerprint_names_the_ring) {
  const std::string cl = R"({"chief": ["c:1"], "worker": ["w0:2", "w1:3"], "evaluator": ["e:4"]})";
  const auto fp = tf(cl, "chief", 0).fingerprint();
  // every task of the cluster, whatever its role, agrees
  BOOST_TEST(tf(cl, "worker", 0).fingerprint() == fp);
  BOOST_TEST(tf(cl, "worker", 1).fingerprint() == fp);
  BOOST_TEST(tf(cl, "evaluator", 0).fingerprint() == fp);
  // the same cluster written differently (key order, another ps or evaluator) is the same ring
  BOOST_TEST(tf(R"({"worker": ["w0:2", "w1:3"], "chief": ["c:1"], "ps": ["p:9"]})", "worker", 1).fingerprint() == fp);
  BOOST_TEST(make_cluster_info({{{"chief", {"c:1"}}, {"worker", {"w0:2", "w1:3"}}}}, "worker", 0).fingerprint() == fp);
  // but not another ring
  const std::pair<std::string, std::string> others[] = {
      {R"({"chief": ["c:1"], "worker": ["w0:2", "w1:4"]})", "an address"},
      {R"({"chief": ["c:1"], "worker": ["w0:2", "x1:3"]})", "a host"},
      {R"({"chief": ["c:1"], "worker": ["w1:3", "w0:2"]})", "the order"},
      {R"({"chief": ["c:1"], "worker": ["w0:2"]})", "a member less"},
      {R"({"chief": ["c:1"], "worker": ["w0:2", "w1:3", "w2:5"]})", "a member more"},
      {R"({"worker": ["c:1", "w0:2", "w1:3"]})", "the chief's job name"},
  };
  for (const auto& [other, what] : others) BOOST_TEST(tf(other, "worker", 0).fingerprint() != fp, what);
  // stable across runs, builds and platforms: it goes on the wire
  BOOST_TEST(fp == 2469863710548935896ull);
  BOOST_TEST(tf(R"({"worker": ["localhost:12345", "localhost:23456"]})", "worker", 1).fingerprint() == 16791809553373326337ull);
  // launchers that give only rank 0's address: the size and the address
  const auto t = torchrun_resolver{"1", "4", "m", "29500"}.resolve().fingerprint();
  BOOST_TEST((torchrun_resolver{"3", "4", "m", "29500"}.resolve().fingerprint() == t));
  BOOST_TEST((torchrun_resolver{"1", "3", "m", "29500"}.resolve().fingerprint() != t));
  BOOST_TEST((torchrun_resolver{"1", "4", "m", "29501"}.resolve().fingerprint() != t));
}

BOOST_AUTO_TEST_CASE(slurm_hostlist_expansion) {
  using v = std::vector<std::string>;
  const std::pair<std::string, v> good[] = {
      {"node[01-03,07],gpu5", {"node01", "node02", "node03", "node07", "gpu5"}},
      {"gpu5", {"gpu5"}},
      {"a,b", {"a", "b"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[08-11]", {"n08", "n09", "n10", "n11"}},
      {"n[007-008]", {"n007", "n008"}},
      {"n[3]", {"n3"}},
      {"n[1-2]-ib", {"n1-ib", "n2-ib"}},
      {"rack[1-2]-n[1,3]", {"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}},
      {"x[1-2],y[01-02],z", {"x1", "x2", "y01", "y02", "z"}},
  };
  for (const auto& [list, want] : good) BOOST_TEST(expand_hostlist(list) == want, tt::per_element());
  const std::pair<std::string, std::string> bad[] = {
      {"n[1-3", "unbalanced brackets in \"n[1-3\""},
      {"n1-3]", "unmatched ] in \"n1-3]\""},
      {"n[[1]]", "unbalanced brackets"},
      {"n[3-1]", "bad range \"3-1\""},
      {"n[a-b]", "bad range \"a-b\""},
      {"n[]", "bad range \"\""},
      {"n[1,,2]", "bad range \"\""},
      {"n[1-]", "bad range \"1-\""},
      {"a,,b", "empty host name at byte 2"},
      {"a,", "empty host name at byte 2"},
      {"", "empty host name"},
      {"n[0-999999][0-999999]", "too many hosts"},
  };
  for (const auto& [list, expect] : bad) {
    const auto msg = error_of([&] { expand_hostlist(list); });
    BOOST_TEST((msg.find("\"" + list + "\"") != std::string::npos || list.size() > 20), msg << " does not quote " << list);
    BOOST_TEST(msg.find(expect) != std::string::npos, msg << " lacks " << expect);
  }
}

BOOST_AUTO_TEST_CASE(slurm_tasks_per_node) {
  BOOST_TEST(expand_tasks_per_node("2(x3),1") == (std::vector<int>{2, 2, 2, 1}), tt::per_element());
  BOOST_TEST(expand_tasks_per_node("4") == (std::vector<int>{4}), tt::per_element());
  BOOST_TEST(expand_tasks_per_node("1,2(x2)") == (std::vector<int>{1, 2, 2}), tt::per_element());
  for (const std::string bad : {"", "x", "2(x3", "2(3)", "(x3)", "2(x0)", "2(x)", "2,,1", "-1", "2(x3),"}) {
    const auto msg = error_of([&] { expand_tasks_per_node(bad); });
    BOOST_TEST(msg.find("bad tasks per node \"" + bad + "\"") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_CASE(slurm_values) {
  // 2 tasks on each of n1, n2 (block order): ports base+0, base+1 on each node
  auto s = slurm_resolver{"3", "4", "n[1-2]", "2(x2)", "4000"}.resolve();
  BOOST_TEST(s.source == "Slurm");
  BOOST_TEST(s.rank == 3);
  BOOST_TEST(s.task_id == 3);
  BOOST_TEST(s.world_size == 4);
  BOOST_TEST(!s.is_chief());
  BOOST_TEST(strs(s.ring) == (std::vector<std::string>{"n1:4000", "n1:4001", "n2:4000", "n2:4001"}), tt::per_element());
  BOOST_TEST(s.spec.jobs.at("worker") == strs(s.ring), tt::per_element());
  // uneven nodes, default port
  auto u = slurm_resolver{"0", "4", "node[01-03,07],gpu5", "", ""}.resolve();
  BOOST_TEST(u.world_size == 4);
  BOOST_TEST(u.is_chief());
  auto v = slurm_resolver{"0", "4", "a,b,c", "2,1,1", ""}.resolve();
  BOOST_TEST(strs(v.ring) == (std::vector<std::string>{"a:29500", "a:29501", "b:29500", "c:29500"}), tt::per_element());
  // without the tasks per node: as evenly as possible, the first nodes one more
  auto w = slurm_resolver{"4", "5", "a,b", "", "100"}.resolve();
  BOOST_TEST(strs(w.ring) == (std::vector<std::string>{"a:100", "a:101", "a:102", "b:100", "b:101"}), tt::per_element());
  // the node id and local id agree with block order
  BOOST_TEST((slurm_resolver{"3", "4", "n[1-2]", "2(x2)", "", "1", "1"}.resolve().rank == 3));
  // a different fingerprint for another step (another port)
  BOOST_TEST((slurm_resolver{"3", "4", "n[1-2]", "2(x2)", "4001"}.resolve().fingerprint() != s.fingerprint()));
  BOOST_TEST((slurm_resolver{"0", "4", "n[1-2]", "2(x2)", "4000"}.resolve().fingerprint() == s.fingerprint()));

  const std::pair<slurm_resolver, std::vector<std::string>> bad[] = {
      {{"4", "4", "n[1-2]", "2(x2)", ""}, {"SLURM_PROCID=4 is not below SLURM_NTASKS=4"}},
      {{"x", "4", "n[1-2]", "2(x2)", ""}, {"SLURM_PROCID=\"x\""}},
      {{"0", "", "n[1-2]", "2(x2)", ""}, {"SLURM_NTASKS=\"\""}},
      {{"0", "0", "n[1-2]", "2(x2)", ""}, {"SLURM_NTASKS=\"0\""}},
      {{"0", "4", "", "2(x2)", ""}, {"SLURM_STEP_NODELIST"}},
      {{"0", "4", "n[1-2]", "2(x3)", ""}, {"\"2(x3)\" describe 3 node(s)", "\"n[1-2]\" has 2"}},
      {{"0", "5", "n[1-2]", "2(x2)", ""}, {"add up to 4 tasks but SLURM_NTASKS=5"}},
      {{"0", "4", "n[1-2]", "2(y2)", ""}, {"bad tasks per node \"2(y2)\""}},
      {{"0", "2", "n[1-2", "", ""}, {"\"n[1-2\""}},
      {{"0", "2", "n1,n[1-2]", "", ""}, {"names node \"n1\" twice"}},
      // found by fuzzing: 520,000 hosts took minutes to check for duplicates
      {{"0", "4", "node[19-0520002]", "2(x2)", ""}, {"expands to too many hosts"}},
      {{"0", "2", "n[1-2]", "", "0"}, {"DTRAIN_PORT=\"0\""}},
      {{"0", "2", "n[1-2]", "", "port"}, {"DTRAIN_PORT=\"port\""}},
      {{"0", "4", "n[1-2]", "", "65535"}, {"DTRAIN_PORT=65535 plus 2 tasks", "past port 65535"}},
      // cyclic distribution: rank 1 sits on the second node, which the ring cannot know
      {{"1", "4", "n[1-2]", "2(x2)", "", "1", "0"}, {"SLURM_PROCID=1 should be task 1 of node 0 (n1)", "SLURM_NODEID=1", "--distribution=block"}},
  };
  for (const auto& [r, expect] : bad) {
    const auto msg = error_of([&] { r.resolve(); });
    BOOST_TEST_CONTEXT(msg) {
      BOOST_TEST((msg.rfind("Slurm", 0) == 0 || msg.rfind("SLURM", 0) == 0));
      for (const auto& e : expect) BOOST_TEST(msg.find(e) != std::string::npos, msg << " lacks " << e);
    }
  }
}

BOOST_AUTO_TEST_CASE(slurm_env) {
  scoped_env env;
  env.set({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_JOB_NODELIST", "job[1-3]"},
           {"SLURM_TASKS_PER_NODE", "1(x3)"}, {"SLURM_NODEID", "2"}, {"SLURM_LOCALID", "0"}});
  auto c = slurm_resolver::from_env().resolve();
  BOOST_TEST(c.rank == 2);
  BOOST_TEST(strs(c.ring) == (std::vector<std::string>{"job1:29500", "job2:29500", "job3:29500"}), tt::per_element());
  // the step's variables win over the job's; DTRAIN_PORT moves the ports
  env.set({{"SLURM_STEP_NODELIST", "st[1-3]"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}, {"DTRAIN_PORT", "7000"}});
  BOOST_TEST(slurm_resolver::from_env().resolve().ring[2].str() == "st3:7000");
  env.set("SLURM_STEP_TASKS_PER_NODE", "3");
  BOOST_TEST(error_of([] { slurm_resolver::from_env().resolve(); }).find("\"3\" describe 1 node(s)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(torchrun_and_mpi) {
  auto t = master_resolver{"2", "4", "10.0.0.1", "1234", "torchrun"}.resolve();
  BOOST_TEST(t.rank == 2);
  BOOST_TEST(t.world_size == 4);
  BOOST_TEST(t.ring.empty());
  BOOST_TEST(t.master->str() == "10.0.0.1:1234");
  BOOST_TEST((t.master == torchrun_resolver{"2", "4", "10.0.0.1", "1234"}.resolve().master));
  BOOST_TEST((torchrun_resolver{"0", "4", "m", ""}.resolve().master->str() == "m:29500"));
  BOOST_TEST((torchrun_resolver{"0", "4", "m", ""}.resolve().is_chief()));
  BOOST_TEST((torchrun_resolver{"0", "2", "::1", "5"}.resolve().master->str() == "[::1]:5"));    // bare IPv6
  BOOST_TEST((torchrun_resolver{"0", "2", "[::1]", "5"}.resolve().master->str() == "[::1]:5"));  // or bracketed
  BOOST_TEST((!torchrun_resolver{"0", "1", "", ""}.resolve().master));  // alone: no address needed
  const std::pair<cluster_info (*)(), std::string> bad[] = {
      {[] { return torchrun_resolver{"0", "2", "", ""}.resolve(); }, "torchrun: rank 0's address is not set (MASTER_ADDR)"},
      {[] { return torchrun_resolver{"2", "2", "m", ""}.resolve(); }, "rank 2 is not below world size 2"},
      {[] { return torchrun_resolver{"-1", "2", "m", ""}.resolve(); }, "RANK=\"-1\""},
      {[] { return torchrun_resolver{"0", "two", "m", ""}.resolve(); }, "WORLD_SIZE=\"two\""},
      {[] { return torchrun_resolver{"0", "0", "m", ""}.resolve(); }, "world size \"0\" must be at least 1"},
      {[] { return torchrun_resolver{"0", "2", "m", "99999"}.resolve(); }, "MASTER_PORT=\"99999\""},
      {[] { return torchrun_resolver{"0", "2", "m:1", ""}.resolve(); }, "MASTER_ADDR=\"m:1\" looks like host:port; give the port in MASTER_PORT"},
      {[] { return torchrun_resolver{"0", "2", "a b", ""}.resolve(); }, "MASTER_ADDR=\"a b\""},
      {[] { return mpi_resolver{"0", "2", "", ""}.resolve(); }, "Open MPI: rank 0's address is not set (DTRAIN_MASTER_ADDR or MASTER_ADDR)"},
      {[] { return mpi_resolver{"x", "2", "m", ""}.resolve(); }, "OMPI_COMM_WORLD_RANK=\"x\""},
      {[] { return mpi_resolver{"0", "", "m", ""}.resolve(); }, "OMPI_COMM_WORLD_SIZE=\"\""},
  };
  for (const auto& [f, expect] : bad) {
    const auto msg = error_of(f);
    BOOST_TEST(msg.find(expect) != std::string::npos, msg << " lacks " << expect);
  }

  scoped_env env;
  env.set({{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "6000"}});
  auto te = torchrun_resolver::from_env().resolve();
  BOOST_TEST(te.source == "torchrun");
  BOOST_TEST(te.rank == 1);
  BOOST_TEST(te.world_size == 3);
  BOOST_TEST(te.master->str() == "head:6000");
  env.set({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  auto me = mpi_resolver::from_env().resolve();
  BOOST_TEST(me.source == "Open MPI");
  BOOST_TEST(me.rank == 2);
  BOOST_TEST(me.world_size == 4);
  BOOST_TEST(me.master->str() == "head:6000");  // MASTER_ADDR / MASTER_PORT when nothing more specific
  env.set({{"DTRAIN_MASTER_ADDR", "mpihead"}, {"DTRAIN_MASTER_PORT", "6001"}});
  BOOST_TEST(mpi_resolver::from_env().resolve().master->str() == "mpihead:6001");
}

BOOST_AUTO_TEST_CASE(local_rank_and_size_from_every_resolver) {
  // what a worker needs to pick its GPU on a host of several: its index among the ring members there
  // TF_CONFIG: members whose addresses name the same host, in rank order (the chief first)
  const cluster_spec spec{{{"chief", {"a:1"}}, {"worker", {"b:1", "a:2", "b:2", "a:3"}}}};
  const int want_rank[] = {0, 0, 1, 1, 2}, want_size[] = {3, 2, 3, 2, 3};  // chief a, then b a b a
  for (int i = 0; i < 5; ++i) {
    const auto c = i == 0 ? make_cluster_info(spec, "chief", 0) : make_cluster_info(spec, "worker", i - 1);
    BOOST_TEST_CONTEXT("rank " << c.rank) {
      BOOST_TEST(c.local_rank == want_rank[i]);
      BOOST_TEST(c.local_size == want_size[i]);
    }
  }
  const auto one_host = make_cluster_info({{{"worker", {"localhost:1", "localhost:2", "localhost:3"}}}}, "worker", 2);
  BOOST_TEST(one_host.local_rank == 2);
  BOOST_TEST(one_host.local_size == 3);
  // Slurm: the task's index on its node in block order, and that node's task count
  const auto s = slurm_resolver{"4", "5", "n[1-2]", "3,2", ""}.resolve();
  BOOST_TEST(s.local_rank == 1);
  BOOST_TEST(s.local_size == 2);
  // torchrun and Open MPI: their variables; without them one process per host
  const auto t = torchrun_resolver{"5", "8", "m", "", "1", "4"}.resolve();
  BOOST_TEST(t.local_rank == 1);
  BOOST_TEST(t.local_size == 4);
  BOOST_TEST((torchrun_resolver{"5", "8", "m", ""}.resolve().local_size == 1));
  const auto o = mpi_resolver{"3", "4", "m", "", "1", "2"}.resolve();
  BOOST_TEST(o.local_rank == 1);
  BOOST_TEST(o.local_size == 2);
  const std::pair<cluster_info (*)(), std::string> bad[] = {
      {[] { return torchrun_resolver{"0", "2", "m", "", "2", "2"}.resolve(); }, "LOCAL_RANK=2 and LOCAL_WORLD_SIZE=2 do not fit"},
      {[] { return torchrun_resolver{"0", "2", "m", "", "0", "3"}.resolve(); }, "must be 1 to 2"},
      {[] { return torchrun_resolver{"0", "2", "m", "", "0", ""}.resolve(); }, "LOCAL_WORLD_SIZE is not set but LOCAL_RANK is"},
      {[] { return mpi_resolver{"0", "2", "m", "", "x", "2"}.resolve(); }, "OMPI_COMM_WORLD_LOCAL_RANK=\"x\""},
  };
  for (const auto& [f, expect] : bad) {
    const auto msg = error_of(f);
    BOOST_TEST(msg.find(expect) != std::string::npos, msg << " lacks " << expect);
  }
  scoped_env env;
  env.set({{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "h"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "3"}});
  BOOST_TEST(resolve_cluster().local_rank == 1);
  env.set({{"RANK", ""}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  BOOST_TEST(resolve_cluster().source == "Open MPI");
  BOOST_TEST(resolve_cluster().local_size == 1);
}

BOOST_AUTO_TEST_CASE(resolve_cluster_precedence) {
  scoped_env env;
  // nothing set: one worker, no network
  auto single = resolve_cluster();
  BOOST_TEST(single.source == "single");
  BOOST_TEST(single.world_size == 1);
  BOOST_TEST(single.rank == 0);
  BOOST_TEST(single.is_chief());
  BOOST_TEST(single.ring.empty());
  BOOST_TEST(!single.master);
  // a Slurm step (an sbatch script's own variables look like this too)
  env.set({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "s[1-2]"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}});
  BOOST_TEST(resolve_cluster().source == "Slurm");
  BOOST_TEST(resolve_cluster().rank == 1);
  // mpirun inside it: Open MPI's rank is this process's, the Slurm step's is not
  env.set({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"MASTER_ADDR", "m"}});
  BOOST_TEST(resolve_cluster().source == "Open MPI");
  BOOST_TEST(resolve_cluster().rank == 3);
  // torchrun (srun torchrun ...)
  env.set({{"RANK", "2"}, {"WORLD_SIZE", "8"}});
  BOOST_TEST(resolve_cluster().source == "torchrun");
  BOOST_TEST(resolve_cluster().world_size == 8);
  // TF_CONFIG over all launchers
  env.set("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})");
  BOOST_TEST(resolve_cluster().source == "TF_CONFIG");
  BOOST_TEST(resolve_cluster().ring[1].str() == "b:2");
  // a spec in code over everything
  auto e = resolve_cluster(simple_cluster_resolver{{{{"chief", {"c:1"}}, {"worker", {"x:1", "y:2"}}}}, {"worker", 1}});
  BOOST_TEST(e.source == "explicit");
  BOOST_TEST(e.rank == 2);
  BOOST_TEST(strs(e.ring) == (std::vector<std::string>{"c:1", "x:1", "y:2"}), tt::per_element());
  // an empty variable is unset; a malformed one is an error, not a silent fallback
  env.set("TF_CONFIG", "");
  BOOST_TEST(resolve_cluster().source == "torchrun");
  env.set("TF_CONFIG", "{oops");
  BOOST_CHECK_THROW(resolve_cluster(), config_error);
  BOOST_TEST(error_of([] { resolve_cluster(simple_cluster_resolver{{{{"worker", {"x:1"}}}}, {"worker", 2}}); })
                 .rfind("explicit: task index 2", 0) == 0);
  // a fixed resolver models the concept and can stand in for any of them
  const fixed_resolver f{e};
  BOOST_TEST(f.resolve().fingerprint() == e.fingerprint());
}

BOOST_AUTO_TEST_SUITE_END()
