// dtrain-launch: starts N local workers of a multi-worker program with TF_CONFIG set for each, the
// way the tutorial starts them by hand, in one command.
//
//   dtrain-launch -n 2 [--base-port P] [--host H] [--max-restarts K] -- ./program args...
//
// Each worker's stdout and stderr lines are prefixed with its rank. SIGINT and SIGTERM are forwarded to
// every worker (a second Ctrl-C kills them). When a worker fails, the others notice the dead peer by
// themselves and exit (code 138); with --max-restarts K the launcher instead stops them and restarts
// all workers, up to K times (TF's restart-the-world), telling each the count in DTRAIN_RESTART_COUNT,
// so they can resume from their backup. Each worker gets DTRAIN_NUM_THREADS = cores / N unless it is
// set, so N workers on one machine do not oversubscribe it. The exit status is 0 when every worker of the last attempt
// succeeded, else the first failure's code, after one summary line per failed worker.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_signal = 0, g_signals = 0;
void on_signal(int s) {
  g_signal = s;
  g_signals = g_signals + 1;
}

struct options {
  int n = 0;
  int base_port = 0;
  std::string host = "localhost";
  int max_restarts = 0;
  std::vector<std::string> command;
};

[[noreturn]] void usage(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "dtrain-launch: %s\n", why.c_str());
  std::fprintf(stderr,
               "usage: dtrain-launch -n N [--base-port P] [--host H] [--max-restarts K] -- program [args...]\n"
               "  -n N              number of workers (TF_CONFIG worker tasks 0..N-1)\n"
               "  --base-port P     worker i listens on P+i (default: free ports)\n"
               "  --host H          the host in the workers' addresses (default localhost)\n"
               "  --max-restarts K  when a worker fails, restart all workers up to K times\n");
  std::exit(why.empty() ? 0 : 2);
}

int number(const std::string& flag, const char* v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi)
    usage("bad value '" + std::string(v) + "' for " + flag + " (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return int(x);
}

options parse(int argc, char** argv) {
  options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") usage("");
    if (i + 1 >= argc) usage("missing value after " + a);
    if (a == "-n") o.n = number(a, argv[++i], 1, 4096);
    else if (a == "--base-port") o.base_port = number(a, argv[++i], 1, 65535);
    else if (a == "--host") o.host = argv[++i];
    else if (a == "--max-restarts") o.max_restarts = number(a, argv[++i], 0, 1000000);
    else usage("unknown option " + a + " (the program's command line goes after --)");
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.n == 0) usage("missing -n N");
  if (o.command.empty()) usage("missing the program to run after --");
  if (o.base_port && o.base_port + o.n - 1 > 65535) usage("--base-port leaves no room for " + std::to_string(o.n) + " ports");
  return o;
}

/// N distinct free ports on the loopback interface (all bound at once, then released).
std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::fprintf(stderr, "dtrain-launch: cannot find a free port: %s\n", std::strerror(errno));
      std::exit(1);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

struct worker {
  int rank;
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;
};

void emit(worker& w, std::string& buf, FILE* to, bool flush_all) {
  std::size_t start = 0, nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    std::fprintf(to, "[%d] %.*s\n", w.rank, int(nl - start), buf.data() + start);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush_all && !buf.empty()) {
    std::fprintf(to, "[%d] %s\n", w.rank, buf.c_str());
    buf.clear();
  }
  std::fflush(to);
}

/// Starts worker `rank`; exits the launcher with a message if the program cannot be run.
void spawn(worker& w, const options& o, const std::string& tf_config, int restart) {
  int out[2], err[2], report[2];
  if (::pipe(out) || ::pipe(err) || ::pipe2(report, O_CLOEXEC)) {
    std::perror("dtrain-launch: pipe");
    std::exit(1);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("dtrain-launch: fork");
    std::exit(1);
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1), ::dup2(err[1], 2);
    ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]), ::close(report[0]);
    ::setenv("TF_CONFIG", tf_config.c_str(), 1);
    ::setenv("DTRAIN_LAUNCH_RANK", std::to_string(w.rank).c_str(), 1);
    ::setenv("DTRAIN_LAUNCH_WORLD_SIZE", std::to_string(o.n).c_str(), 1);
    ::setenv("DTRAIN_RESTART_COUNT", std::to_string(restart).c_str(), 1);
    // one thread budget for the machine: the workers share its cores unless told otherwise
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    ::setenv("DTRAIN_NUM_THREADS", std::to_string(std::max(1L, cores / o.n)).c_str(), 0);
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    const int e = errno;
    (void)!::write(report[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(out[1]), ::close(err[1]), ::close(report[1]);
  int e = 0;
  if (::read(report[0], &e, sizeof e) == sizeof e) {
    std::fprintf(stderr, "dtrain-launch: cannot run %s: %s\n", o.command[0].c_str(), std::strerror(e));
    std::exit(127);
  }
  ::close(report[0]);
  w.pid = pid, w.out = out[0], w.err = err[0], w.exited = false, w.status = 0;
}

void signal_all(std::vector<worker>& ws, int sig) {
  for (auto& w : ws)
    if (!w.exited) ::kill(-w.pid, sig);
}

/// Pumps output and reaps workers until all have exited. With `stop_on_failure`, the first failure
/// makes it SIGTERM the rest (SIGKILL after 10 s). Returns the index of the first failed worker or -1.
int supervise(std::vector<worker>& ws, bool stop_on_failure) {
  int first_failed = -1;
  std::chrono::steady_clock::time_point stop_at{};
  bool stopping = false;
  for (;;) {
    if (g_signal) {
      const int sig = g_signals > 1 && g_signal == SIGINT ? SIGKILL : g_signal;
      g_signal = 0;
      signal_all(ws, sig);
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<worker*, bool>> who;
    for (auto& w : ws)
      for (int fd : {w.out, w.err})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0}), who.emplace_back(&w, fd == w.out);
    if (fds.empty() && std::all_of(ws.begin(), ws.end(), [](const worker& w) { return w.exited; })) break;
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    else ::usleep(20000);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
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
        if (ws[i].pid == pid) {
          ws[i].exited = true, ws[i].status = status;
          const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          if (!ok && first_failed < 0) first_failed = int(i);
          if (!ok && stop_on_failure && !stopping) {
            stopping = true;
            stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            signal_all(ws, SIGTERM);
          }
        }
    if (stopping && std::chrono::steady_clock::now() > stop_at) signal_all(ws, SIGKILL);
  }
  return first_failed;
}

std::string describe(const worker& w) {
  char b[160];
  if (WIFSIGNALED(w.status))
    std::snprintf(b, sizeof b, "worker %d (pid %d) killed by signal %d (%s)", w.rank, int(w.pid), WTERMSIG(w.status),
                  strsignal(WTERMSIG(w.status)));
  else
    std::snprintf(b, sizeof b, "worker %d (pid %d) exited with code %d", w.rank, int(w.pid), WEXITSTATUS(w.status));
  return b;
}

int exit_code(const worker& w) {
  return WIFSIGNALED(w.status) ? 128 + WTERMSIG(w.status) : WEXITSTATUS(w.status);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::vector<int> ports;
  if (o.base_port)
    for (int i = 0; i < o.n; ++i) ports.push_back(o.base_port + i);
  else
    ports = free_ports(o.n);
  std::string cluster = "{\"cluster\": {\"worker\": [";
  for (int i = 0; i < o.n; ++i) cluster += (i ? ", \"" : "\"") + o.host + ":" + std::to_string(ports[std::size_t(i)]) + "\"";
  cluster += "]}";

  std::vector<worker> ws;
  for (int restart = 0;; ++restart) {
    ws.assign(std::size_t(o.n), worker{});
    for (int i = 0; i < o.n; ++i) {
      ws[std::size_t(i)].rank = i;
      spawn(ws[std::size_t(i)], o,
            cluster + ", \"task\": {\"type\": \"worker\", \"index\": " + std::to_string(i) + "}}", restart);
    }
    const bool may_restart = restart < o.max_restarts;
    const int failed = supervise(ws, may_restart);
    if (failed < 0) return 0;
    if (!may_restart || g_signals > 0) break;
    std::fprintf(stderr, "dtrain-launch: %s; restarting all %d workers (restart %d of %d)\n",
                 describe(ws[std::size_t(failed)]).c_str(), o.n, restart + 1, o.max_restarts);
  }
  int code = 0;
  for (const auto& w : ws)
    if (!(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)) {
      std::fprintf(stderr, "dtrain-launch: %s\n", describe(w).c_str());
      if (!code) code = exit_code(w);
    }
  return code;
}
