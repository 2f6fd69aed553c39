// dtrain-launch: starts N local workers of a multi-worker program with TF_CONFIG set for each, the
// way the tutorial starts them by hand, in one command.
//
//   dtrain-launch -n 2 [--ps K] [--base-port P] [--host H] [--kill-on-failure] [--max-restarts K] -- ./program args...
//
// Worker i gets TF_CONFIG = {"cluster": {"worker": ["H:P0", ..., "H:Pn-1"]}, "task": {"type": "worker",
// "index": i}}, DTRAIN_LAUNCH_RANK = i, DTRAIN_LAUNCH_WORLD_SIZE = N, DTRAIN_RESTART_COUNT, and
// DTRAIN_NUM_THREADS = cores / N unless it is set, so N workers on one machine do not oversubscribe it,
// and DTRAIN_JOB_TOKEN = 64 random hex digits unless DTRAIN_JOB_TOKEN or DTRAIN_JOB_TOKEN_FILE is set, so
// only its own workers can join the job (docs/security.md). With --ps K the job is a parameter server
// job: a chief task (the coordinator), the N workers and K ps tasks, as the parameter server tutorial's
// TF_CONFIG has them; its tasks' lines are prefixed with their task ("[chief:0] ", "[ps:1] "), and the
// chief and ps tasks get DTRAIN_NUM_THREADS = 1 (the workers compute).
// Each line of a worker's stdout and stderr goes to the launcher's stdout and stderr, whole and prefixed
// with the rank ("[1] "); a last line without a newline is flushed when the worker closes the stream.
// When the launcher's stdout is a terminal, workers get DTRAIN_PROGRESS=live and their progress bars
// are redrawn in place as they run.
// SIGINT and SIGTERM are forwarded to every worker's process group (a second SIGINT kills them).
// When a worker fails, the others are left to notice the dead peer by themselves (they exit with
// code 138); --kill-on-failure instead stops them (SIGTERM, SIGKILL 10 s later), and --max-restarts K
// stops them and restarts all workers, up to K times (TF's restart-the-world), so they can resume from
// their backup. The exit status is 0 when every worker of the last attempt succeeded, else the first
// failure's exit code (128 + signal when killed), after one summary line per failed worker; 128 + signal
// when the launcher itself was stopped by a signal and every worker still exited 0; 2 for bad usage;
// 127 when the program cannot be run.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_signal = 0, g_signals = 0, g_first_signal = 0;
void on_signal(int s) {
  if (!g_first_signal) g_first_signal = s;
  g_signal = s;
  g_signals = g_signals + 1;
}

constexpr auto stop_grace = std::chrono::seconds(10);  // SIGTERM, then SIGKILL this much later
constexpr std::size_t max_line = 1 << 20;              // a longer line without '\n' is cut here

struct options {
  int n = 0;
  int ps = 0;  // --ps: ps tasks (and a chief) of a parameter server job
  int base_port = 0;
  std::string host = "localhost";
  bool kill_on_failure = false;
  int max_restarts = 0;
  std::vector<std::string> gpus;  // --gpus: worker i sees gpus[i % size] alone
  std::vector<std::string> command;
};

constexpr const char* usage_text =
    "usage: dtrain-launch -n N [--ps K] [--base-port P] [--host H] [--gpus LIST] [--kill-on-failure] [--max-restarts K] -- "
    "program [args...]\n"
    "Starts N local workers of `program`, each with TF_CONFIG set as the multi-worker tutorial sets it by hand:\n"
    "  {\"cluster\": {\"worker\": [\"H:P0\", ...]}, \"task\": {\"type\": \"worker\", \"index\": i}}\n"
    "and DTRAIN_LAUNCH_RANK=i, DTRAIN_LAUNCH_WORLD_SIZE=N, and a random DTRAIN_JOB_TOKEN unless one (or\n"
    "DTRAIN_JOB_TOKEN_FILE) is set. Output lines are prefixed with the rank.\n"
    "  -n N               number of workers (TF_CONFIG worker tasks 0..N-1)\n"
    "  --ps K             a parameter server job: also a chief task (the coordinator) and K ps tasks; the\n"
    "                     chief takes the first port, the workers the next N, the ps tasks the last K\n"
    "  --base-port P      worker i listens on P+i (default: free ports of H)\n"
    "  --host H           the host in the workers' addresses (default localhost)\n"
    "  --gpus LIST        pin worker i to GPU LIST[i mod its length] (CUDA_VISIBLE_DEVICES; LIST: indices or\n"
    "                     UUIDs, comma-separated, e.g. --gpus 0,1,2,3); without it every worker sees every GPU\n"
    "                     and takes the one of its local rank\n"
    "  --kill-on-failure  when a worker fails, stop the others (default: they notice and exit by themselves)\n"
    "  --max-restarts K   when a worker fails, stop the others and restart all workers, up to K times\n"
    "  -h, --help         this text\n"
    "SIGINT and SIGTERM are forwarded to the workers; a second SIGINT kills them. Exit status: 0 when every\n"
    "worker exited 0, else the first failed worker's code (128+signal if killed); 128+signal when the launcher\n"
    "was stopped by one and the workers still exited 0; 2 for bad usage; 127 when the program cannot be run.\n";

/// One line naming the mistake (the help is one --help away, not repeated after every mistake).
[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "dtrain-launch: %s; see dtrain-launch --help\n", why.c_str());
  std::exit(2);
}

int number(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    usage_error("bad value '" + v + "' for " + flag + " (expected an integer in " + std::to_string(lo) + ".." +
                std::to_string(hi) + ")");
  return int(x);
}

/// The processes of the job: the workers, and with --ps the chief and the ps tasks.
int tasks(const options& o) { return o.n + (o.ps ? 1 + o.ps : 0); }

options parse(int argc, char** argv) {
  options o;
  bool have_n = false, have_separator = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      have_separator = true;
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    }
    if (a == "--kill-on-failure") {
      o.kill_on_failure = true;
      continue;
    }
    if (a.empty() || a[0] != '-')
      usage_error("missing -- before the program to run: dtrain-launch -n N [options] -- " + a + " ...");
    // the value: "--flag=V", "-nV", or the next argument
    std::optional<std::string> value;
    if (const auto eq = a.find('='); a.starts_with("--") && eq != std::string::npos)
      value = a.substr(eq + 1), a.resize(eq);
    else if (a.starts_with("-n") && a.size() > 2)
      value = a.substr(2), a = "-n";
    const bool known = a == "-n" || a == "--ps" || a == "--base-port" || a == "--host" || a == "--gpus" || a == "--max-restarts";
    if (!known) usage_error("unknown option " + a + " (the program's own options go after --)");
    if (!value) {
      if (i + 1 >= argc) usage_error("missing value after " + a);
      value = argv[++i];
    }
    if (a == "-n") o.n = number(a, *value, 1, 4096), have_n = true;
    else if (a == "--ps") o.ps = number(a, *value, 0, 4096);
    else if (a == "--base-port") o.base_port = number(a, *value, 1, 65535);
    else if (a == "--host") o.host = *value;
    else if (a == "--gpus") {
      o.gpus.clear();
      for (std::size_t from = 0;;) {
        const std::size_t comma = value->find(',', from);
        const std::string g = value->substr(from, comma == std::string::npos ? std::string::npos : comma - from);
        if (g.empty() || g.find_first_of(" \t") != std::string::npos)
          usage_error("bad value '" + *value + "' for --gpus (expected GPU indices or UUIDs, comma-separated)");
        o.gpus.push_back(g);
        if (comma == std::string::npos) break;
        from = comma + 1;
      }
    } else o.max_restarts = number(a, *value, 0, 1000000);
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (!have_n) usage_error("missing -n N (the number of workers)");
  if (!have_separator) usage_error("missing -- and the program to run after it");
  if (o.command.empty()) usage_error("missing the program to run after --");
  if (o.host.empty()) usage_error("--host must not be empty");
  if (o.base_port && o.base_port + tasks(o) - 1 > 65535)
    usage_error("--base-port " + std::to_string(o.base_port) + " leaves no room for " + std::to_string(tasks(o)) + " ports");
  return o;
}

/// N distinct free ports of `host`: N sockets bound to port 0 of its first address, all at once (so the
/// kernel cannot hand out one port twice), read back, then closed for the workers to take.
std::vector<int> free_ports(const std::string& host, int n) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (const int e = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); e != 0) {
    std::fprintf(stderr, "dtrain-launch: cannot resolve --host %s: %s\n", host.c_str(), ::gai_strerror(e));
    std::exit(1);
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  const socklen_t addr_len = res->ai_addrlen;
  const int family = res->ai_family;
  ::freeaddrinfo(res);
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage a = addr;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), addr_len) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::fprintf(stderr, "dtrain-launch: cannot find a free port on %s (the workers run on this machine): %s\n",
                   host.c_str(), std::strerror(errno));
      std::exit(1);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(a).sin6_port
                                                   : reinterpret_cast<sockaddr_in&>(a).sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + '"';
}

struct worker {
  int rank = 0;       // the process's place in the job (DTRAIN_LAUNCH_RANK)
  std::string label;  // its output's prefix: the rank, or in a parameter server job its task ("ps:0")
  bool computes = true;  // a worker (a chief or ps task of a parameter server job does not)
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;
};

bool failed(const worker& w) { return !(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0); }

bool g_terminal = false;     // the launcher's stdout is a terminal: workers' progress bars are drawn live
bool g_live_shown = false;   // a bar is drawn on the terminal's last line, without its newline

/// Writes the whole lines of `buf` to `to`, each prefixed with the rank; with `at_eof` also the rest.
/// A '\r' ends a progress bar's redraw, which only the next one replaces: on a terminal the newest is
/// drawn in place (on stdout's last line, until a whole line comes), elsewhere only the bar's last line,
/// ended by '\n', is written.
void emit(const worker& w, std::string& buf, FILE* to, bool at_eof) {
  auto clear_live = [] {
    if (g_live_shown) std::fputs("\r\033[K", stdout), std::fflush(stdout);
    g_live_shown = false;
  };
  std::size_t start = 0, end;
  bool redraw = false;  // the rest of buf follows a '\r'
  while ((end = buf.find_first_of("\r\n", start)) != std::string::npos) {
    redraw = buf[end] == '\r';
    if (!redraw) clear_live(), std::fprintf(to, "[%s] %.*s\n", w.label.c_str(), int(end - start), buf.data() + start);
    start = end + 1;
  }
  buf.erase(0, start);
  if (!buf.empty() && (at_eof || buf.size() >= max_line)) {
    clear_live();
    std::fprintf(to, "[%s] %s\n", w.label.c_str(), buf.c_str());
    buf.clear();
  } else if (!buf.empty() && redraw && g_terminal) {
    std::fprintf(stdout, "\r\033[K[%s] %s", w.label.c_str(), buf.c_str());
    g_live_shown = true;
  }
  std::fflush(to);
  if (g_live_shown) std::fflush(stdout);
}

/// A job token for the workers: 32 bytes from the kernel's CSPRNG, as hex.
std::string make_job_token() {
  unsigned char b[32];
  for (std::size_t got = 0; got < sizeof b;) {
    const ssize_t r = ::getrandom(b + got, sizeof b - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      std::perror("dtrain-launch: getrandom");
      std::exit(1);
    }
    got += std::size_t(r);
  }
  std::string hex;
  for (unsigned char c : b) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
  return hex;
}

/// Starts worker `w.rank`. Returns the errno of a failed fork or exec (0 on success).
int spawn(worker& w, const options& o, const std::string& tf_config, int restart) {
  int out[2], err[2], report[2];
  if (::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC) || ::pipe2(report, O_CLOEXEC)) {
    std::perror("dtrain-launch: pipe");
    std::exit(1);
  }
  // everything the child needs is made before fork
  const std::string rank = std::to_string(w.rank), size = std::to_string(tasks(o)), count = std::to_string(restart);
  const std::string threads = std::to_string(w.computes ? std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN) / o.n) : 1L);
  const std::string gpu = o.gpus.empty() ? std::string() : o.gpus[std::size_t(w.rank) % o.gpus.size()];
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1]}) ::close(fd);
    return e;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a terminal's Ctrl-C reaches the launcher only, which forwards it
    ::dup2(out[1], 1), ::dup2(err[1], 2);  // dup2 clears O_CLOEXEC on 1 and 2; every other pipe end closes on exec
    ::setenv("TF_CONFIG", tf_config.c_str(), 1);
    ::setenv("DTRAIN_LAUNCH_RANK", rank.c_str(), 1);
    ::setenv("DTRAIN_LAUNCH_WORLD_SIZE", size.c_str(), 1);
    ::setenv("DTRAIN_RESTART_COUNT", count.c_str(), 1);
    ::setenv("DTRAIN_NUM_THREADS", threads.c_str(), 0);
    if (!gpu.empty()) ::setenv("CUDA_VISIBLE_DEVICES", gpu.c_str(), 1);
    if (g_terminal) ::setenv("DTRAIN_PROGRESS", "live", 0);  // their bars reach a terminal through us
    ::execvp(argv[0], argv.data());
    const int e = errno;
    (void)!::write(report[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(out[1]), ::close(err[1]), ::close(report[1]);
  int e = 0;
  ssize_t r;
  while ((r = ::read(report[0], &e, sizeof e)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  w.pid = pid, w.out = out[0], w.err = err[0], w.exited = false, w.status = 0;
  if (r == sizeof e) {  // exec failed: the child exits 127 at once
    ::waitpid(pid, &w.status, 0);
    w.exited = true;
    ::close(w.out), ::close(w.err);
    w.out = w.err = -1;
    return e;
  }
  return 0;
}

void signal_all(std::vector<worker>& ws, int sig) {
  for (auto& w : ws)
    if (w.pid > 0 && !w.exited) ::kill(-w.pid, sig);  // pid -1: not started
}

/// Pumps output and reaps workers until all have exited. With `stop_on_failure`, the first failure
/// makes it SIGTERM the rest (SIGKILL after stop_grace). Returns the index of the first failed worker or -1.
int supervise(std::vector<worker>& ws, bool stop_on_failure) {
  int first_failed = -1;
  std::chrono::steady_clock::time_point kill_at{};
  bool stopping = false;
  for (;;) {
    if (const int sig = g_signal) {
      g_signal = 0;
      const bool kill = sig == SIGINT && g_signals > 1;
      std::fprintf(stderr, "dtrain-launch: got %s; %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                   kill ? "killing the workers" : sig == SIGINT ? "forwarding it to the workers (again to kill them)"
                                                                : "forwarding it to the workers");
      if (kill) signal_all(ws, SIGKILL);
      else signal_all(ws, sig);
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<worker*, bool>> who;
    for (auto& w : ws)
      for (int fd : {w.out, w.err})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0}), who.emplace_back(&w, fd == w.out);
    if (fds.empty() && std::all_of(ws.begin(), ws.end(), [](const worker& w) { return w.exited; })) break;
    // a signal interrupts poll (EINTR); the timeout bounds the wait for one that comes just before it
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    else ::usleep(20000);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) continue;
      auto [w, is_out] = who[i];
      char buf[65536];
      const ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      std::string& b = is_out ? w->out_buf : w->err_buf;
      if (r > 0) {
        b.append(buf, std::size_t(r));
        emit(*w, b, is_out ? stdout : stderr, false);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit(*w, b, is_out ? stdout : stderr, true);
        ::close(fds[i].fd);
        (is_out ? w->out : w->err) = -1;
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0)
      for (std::size_t i = 0; i < ws.size(); ++i)
        if (ws[i].pid == pid && !ws[i].exited) {
          ws[i].exited = true, ws[i].status = status;
          if (!failed(ws[i])) continue;
          if (first_failed < 0) first_failed = int(i);
          if (stop_on_failure && !stopping) {
            signal_all(ws, SIGTERM);
            stopping = true, kill_at = std::chrono::steady_clock::now() + stop_grace;
          }
        }
    if (stopping && std::chrono::steady_clock::now() > kill_at) signal_all(ws, SIGKILL);
  }
  return first_failed;
}

std::string describe(const worker& w) {
  char b[200];
  if (WIFSIGNALED(w.status))
    std::snprintf(b, sizeof b, "%s %s (pid %d) killed by signal %d (%s)", w.computes ? "worker" : "task", w.label.c_str(),
                  int(w.pid), WTERMSIG(w.status), ::strsignal(WTERMSIG(w.status)));
  else
    std::snprintf(b, sizeof b, "%s %s (pid %d) exited with code %d", w.computes ? "worker" : "task", w.label.c_str(),
                  int(w.pid), WEXITSTATUS(w.status));
  return b;
}

int exit_code(const worker& w) { return WIFSIGNALED(w.status) ? 128 + WTERMSIG(w.status) : WEXITSTATUS(w.status); }

}  // namespace

int main(int argc, char** argv) {
  // 0, 1 and 2 open, so that no pipe lands on them
  for (int fd = 0; fd < 3; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
  // first of all, so that a signal sent right after starting the launcher is not lost (a background job of a
  // non-interactive shell starts with SIGINT ignored); the children get the default back on exec
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  const options o = parse(argc, argv);
  g_terminal = ::isatty(1) != 0;
  auto set = [](const char* name) { return std::getenv(name) && *std::getenv(name); };
  if (!set("DTRAIN_JOB_TOKEN") && !set("DTRAIN_JOB_TOKEN_FILE"))  // inherited by every worker, kept over restarts
    ::setenv("DTRAIN_JOB_TOKEN", make_job_token().c_str(), 1);

  std::vector<int> ports;
  if (o.base_port)
    for (int i = 0; i < tasks(o); ++i) ports.push_back(o.base_port + i);
  else
    ports = free_ports(o.host, tasks(o));
  // the tasks in port order: (job, index)
  std::vector<std::pair<std::string, int>> task_list;
  if (o.ps) task_list.emplace_back("chief", 0);
  for (int i = 0; i < o.n; ++i) task_list.emplace_back("worker", i);
  for (int i = 0; i < o.ps; ++i) task_list.emplace_back("ps", i);
  std::string cluster = "{\"cluster\": {";
  for (const char* job : {"chief", "worker", "ps"}) {
    std::string list;
    for (std::size_t t = 0; t < task_list.size(); ++t)
      if (task_list[t].first == job)
        list += (list.empty() ? "" : ", ") + json_string(o.host + ":" + std::to_string(ports[t]));
    if (!list.empty()) cluster += std::string(cluster.back() == '{' ? "" : ", ") + json_string(job) + ": [" + list + "]";
  }
  cluster += "}";

  std::vector<worker> ws;
  int first = -1;  // the first worker of the last attempt to fail
  for (int restart = 0;; ++restart) {
    ws.assign(task_list.size(), worker{});
    for (int i = 0; i < int(task_list.size()); ++i) {
      worker& w = ws[std::size_t(i)];
      const auto& [job, index] = task_list[std::size_t(i)];
      w.rank = i;
      w.label = o.ps ? job + ":" + std::to_string(index) : std::to_string(i);
      w.computes = job == "worker";
      const std::string tf_config =
          cluster + ", \"task\": {\"type\": " + json_string(job) + ", \"index\": " + std::to_string(index) + "}}";
      if (const int e = spawn(w, o, tf_config, restart)) {
        std::fprintf(stderr, "dtrain-launch: cannot run %s: %s\n", o.command[0].c_str(), std::strerror(e));
        w.exited = true;
        signal_all(ws, SIGKILL);  // the workers already started
        for (auto& v : ws)
          if (v.pid > 0 && !v.exited) ::waitpid(v.pid, nullptr, 0);
        return 127;
      }
    }
    const bool may_restart = restart < o.max_restarts;
    first = supervise(ws, may_restart || o.kill_on_failure);
    if (first < 0) break;
    if (!may_restart || g_signals > 0) break;
    std::fprintf(stderr, "dtrain-launch: %s; restarting all %d %s (restart %d of %d)\n",
                 describe(ws[std::size_t(first)]).c_str(), tasks(o), o.ps ? "tasks" : "workers", restart + 1, o.max_restarts);
  }
  for (const auto& w : ws)
    if (failed(w)) std::fprintf(stderr, "dtrain-launch: %s\n", describe(w).c_str());
  int code = first >= 0 ? exit_code(ws[std::size_t(first)]) : 0;
  if (!code && g_first_signal) {  // stopped from outside, though every worker exited 0: not a finished run
    std::fprintf(stderr, "dtrain-launch: stopped by signal %d (%s); every worker exited 0\n", int(g_first_signal),
                 ::strsignal(g_first_signal));
    code = 128 + g_first_signal;
  }
  return code;
}
