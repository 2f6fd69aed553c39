// train_throughput: samples/s of full training steps (forward, backward, optimizer) of Keras models (the
// tutorial's CNN, an MLP, ResNet-20, a two-block GPT-style transformer), dtrain against PyTorch and
// TensorFlow in the same invocation. See bench/README.md for the columns.
//
//   cmake --build build --target train_throughput && build/bench/train_throughput [--quick] [--no-torch]
//   build/bench/train_throughput --device cuda     # on a GPU: the cuda backend against PyTorch on that GPU
#include <dtrain/core/threads.hpp>
#include <dtrain/layers/activations.hpp>
#include <dtrain/layers/conv2d.hpp>
#include <dtrain/layers/dense.hpp>
#include <dtrain/layers/input.hpp>
#include <dtrain/layers/reshape.hpp>
#include <dtrain/losses/crossentropy.hpp>
#include <dtrain/metrics/accuracy.hpp>
#include <dtrain/model/sequential.hpp>
#include <dtrain/optimizers/adam.hpp>
#include <dtrain/version.hpp>

#include "fma_peak.hpp"
#include "mnist_models.hpp"
#ifdef DTRAIN_BENCH_CUDA
#include <dtrain/backend/cuda.hpp>
#endif

#include <fcntl.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

extern "C" __attribute__((weak)) char* openblas_get_corename(void);  // absent with another BLAS
extern char** environ;

namespace {

using cnn = dtrain::sequential<dtrain::input<28, 28>, dtrain::reshape<28, 28, 1>, dtrain::conv2d<32, 3, dtrain::relu>,
                               dtrain::flatten, dtrain::dense<128, dtrain::relu>, dtrain::dense<10>>;
using mlp = dtrain::sequential<dtrain::input<784>, dtrain::dense<256, dtrain::relu>, dtrain::dense<256, dtrain::relu>,
                               dtrain::dense<10>>;
using resnet20 = mnist_setup::resnet20;  // the examples' (examples/mnist_models.hpp)

/// GPT-2's decoder block (normalization first) twice: width 256, 4 causal heads of 64, a 1024-wide GELU
/// feed-forward; sequences of 128 tokens of a 256-token vocabulary, the next token's logits at every step.
namespace gpt {
constexpr std::size_t steps = 128, vocab = 256, width = 256;
template <int I>
struct tag;
template <int I>  // block I reads node tag<4 * I> and ends in tag<4 * I + 4>
using decoder_block = dtrain::block<
    dtrain::layer_normalization<>, dtrain::node<tag<4 * I + 1>, dtrain::multi_head_attention<4, 64, dtrain::use_causal_mask<true>>>,
    dtrain::node<tag<4 * I + 2>, dtrain::add, tag<4 * I>, tag<4 * I + 1>>, dtrain::layer_normalization<>,
    dtrain::dense<4 * width, dtrain::gelu>, dtrain::node<tag<4 * I + 3>, dtrain::dense<width>>,
    dtrain::node<tag<4 * I + 4>, dtrain::add, tag<4 * I + 2>, tag<4 * I + 3>>>;
struct tokens;
struct positions;
using transformer = dtrain::functional<dtrain::input<steps>, dtrain::node<tokens, dtrain::embedding<vocab, width>>,
                                       dtrain::node<positions, dtrain::position_embedding<steps>>,
                                       dtrain::node<tag<0>, dtrain::add, tokens, positions>, decoder_block<0>,
                                       decoder_block<1>, dtrain::layer_normalization<>, dtrain::dense<vocab>>;
}  // namespace gpt
using gpt::transformer;
/// A character model of the text-generation tutorial's shape: 64 tokens of a 256-token vocabulary embedded
/// in 64 dimensions, an LSTM of 256 units over them, the next token's logits at every step.
using lstm = dtrain::sequential<dtrain::input<64>, dtrain::embedding<256, 64>,
                                dtrain::lstm<256, dtrain::return_sequences<true>>, dtrain::dense<256>>;
const std::vector<std::string> known_models{"cnn", "mlp", "resnet20", "transformer", "lstm"};

constexpr const char* python = "/usr/bin/python3";
constexpr const char* malloc_tunables =
    "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296";

struct timing {
  double window_s = 0.25;  // seconds per timed window
  int windows = 7;         // timed windows; the median is reported
  double warmup_s = 0.5;
  bool best = false;       // --stat best: the fastest window instead of the median (dtrain only)
};

struct result {
  double ms_per_step = 0, samples_per_s = 0;
  double peak_bytes = 0;  // device memory at its peak (GPU runs)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Generated data: uniform [0, 1) pixels, uniform labels (throughput does not depend on the values); for
/// a sequence model, uniform tokens and a label per step.
template <class Net>
std::pair<dtrain::tensor, dtrain::tensor> make_batch(std::size_t batch) {
  constexpr bool sequence = Net::output_shape::rank == 2;
  constexpr std::size_t classes = Net::output_shape::dims[Net::output_shape::rank - 1];
  dtrain::extents ex{batch};
  for (auto d : Net::input_shape::dims) ex.push_back(d);
  dtrain::tensor x = dtrain::zeros(ex), y = sequence ? dtrain::zeros(ex) : dtrain::zeros({batch});
  dtrain::rng gen(7);
  for (auto& v : x) v = sequence ? static_cast<float>(gen.below(classes)) : gen.uniform();
  for (auto& v : y) v = static_cast<float>(gen.below(classes));
  return {std::move(x), std::move(y)};
}

template <class Net>
void compile(Net& model) {
  model.compile({.optimizer = dtrain::adam{{.learning_rate = 1e-3f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::accuracy{}}});
}

/// Training steps of `model` on a generated batch: a warm-up that learns how many steps fill a window,
/// then `t.windows` timed windows (the median, or with --stat best the fastest).
template <class Model>
result time_steps(Model& model, std::size_t batch, const timing& t) {
  compile(model);
  auto [x, y] = make_batch<Model>(batch);
  const double t0 = now_s();
  int done = 0;
  while (done < 5 || now_s() - t0 < t.warmup_s) model.train_step(x, y), ++done;
  const double per = (now_s() - t0) / done;
  const int steps = std::max(3, static_cast<int>(t.window_s / per + 0.5));
  std::vector<double> ms;
  for (int w = 0; w < t.windows; ++w) {
    const double s = now_s();
    for (int i = 0; i < steps; ++i) model.train_step(x, y);
    ms.push_back((now_s() - s) * 1e3 / steps);
  }
  const double m = t.best ? *std::min_element(ms.begin(), ms.end()) : median(ms);
  return {m, static_cast<double>(batch) * 1e3 / m};
}

template <class Net>
result run_dtrain(std::size_t batch, int threads, const std::string& precision, const timing& t) {
  dtrain::set_num_threads(threads);
  Net model(42);
  model.set_dtype_policy(dtrain::dtype_policy(precision));
  return time_steps(model, batch, t);
}

result run_dtrain(const std::string& model, std::size_t batch, int threads, const std::string& precision,
                  const timing& t) {
  if (model == "cnn") return run_dtrain<cnn>(batch, threads, precision, t);
  if (model == "transformer") return run_dtrain<transformer>(batch, threads, precision, t);
  if (model == "lstm") return run_dtrain<lstm>(batch, threads, precision, t);
  return model == "mlp" ? run_dtrain<mlp>(batch, threads, precision, t)
                        : run_dtrain<resnet20>(batch, threads, precision, t);
}

/// Peak resident memory of this process, KiB (VmHWM).
long vm_hwm_kib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/// A child process with its stdin and stdout on pipes, spoken to line by line.
class child {
 public:
  child(std::vector<std::string> argv, std::vector<std::string> extra_env) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      bool replaced = false;
      for (const auto& x : extra_env)
        if (std::strncmp(*e, x.c_str(), x.find('=') + 1) == 0) replaced = true;
      if (!replaced) env_s.emplace_back(*e);
    }
    env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> av, ev;
    for (auto& a : argv) av.push_back(a.data());
    for (auto& e : env_s) ev.push_back(e.data());
    av.push_back(nullptr), ev.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0), dup2(out[1], 1);
      close(in[0]), close(in[1]), close(out[0]), close(out[1]);
      const int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, 2);
      execvpe(av[0], av.data(), ev.data());  // the interpreter may be a bare name on PATH
      _exit(127);
    }
    close(in[0]), close(out[1]);
    if (pid_ < 0) {
      close(in[1]), close(out[0]);
      return;
    }
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (to_) std::fclose(to_);
    if (from_) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool send(const std::string& line) {
    if (!to_) return false;
    return std::fputs((line + "\n").c_str(), to_) >= 0 && std::fflush(to_) == 0;
  }
  std::optional<nlohmann::json> receive() {
    if (!from_) return std::nullopt;
    std::string line;
    for (int c; (c = std::fgetc(from_)) != EOF && c != '\n';) line.push_back(static_cast<char>(c));
    if (line.empty()) return std::nullopt;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
  }
  void close_input() {
    if (to_) std::fclose(to_), to_ = nullptr;
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

/// A Python peer (PyTorch or TensorFlow), a co-process that answers measurement requests.
class py_peer {
 public:
  /// `version_key`: the key of the version in the script's first line ("torch", "tensorflow").
  py_peer(const std::string& interpreter, const std::string& script, std::vector<std::string> env,
          const std::string& version_key) {
    proc_.emplace(std::vector<std::string>{interpreter, script, "serve"}, std::move(env));
    if (auto hello = proc_->receive(); hello && hello->value("ok", false)) {
      ok_ = true;
      version_ = hello->value(version_key, "?");
    } else {
      why_ = hello ? hello->value("error", "no answer") : "could not start " + interpreter;
      proc_->close_input();
    }
  }
  ~py_peer() {
    if (proc_) proc_->send("quit");
  }
  bool ok() const { return ok_; }
  const std::string& version() const { return version_; }
  const std::string& why() const { return why_; }

  /// One measurement: `setting` is the thread count (CPU peers) or the mode (GPU peer).
  std::optional<result> run(const std::string& model, std::size_t batch, const std::string& setting, const timing& t) {
    if (!ok_) return std::nullopt;
    std::ostringstream req;
    req << model << ' ' << batch << ' ' << setting << ' ' << t.window_s << ' ' << t.windows;
    if (!proc_->send(req.str())) return ok_ = false, std::nullopt;
    auto r = proc_->receive();
    if (!r) return ok_ = false, std::nullopt;
    if (!r->value("ok", false)) return std::nullopt;
    return result{r->value("ms_per_step", 0.0), r->value("samples_per_s", 0.0), r->value("peak_bytes", 0.0)};
  }

 private:
  std::optional<child> proc_;
  bool ok_ = false;
  std::string version_, why_;
};

/// The environment of bench/torch_train.py in one of its settings ("shipped", "best").
std::vector<std::string> torch_env(const std::string& setting) {
  std::vector<std::string> env{"DTRAIN_TORCH_SETTING=" + setting};
  if (setting == "best") env.emplace_back(malloc_tunables);
  return env;
}

std::string script_path() {
  if (const char* s = std::getenv("DTRAIN_TORCH_SCRIPT")) return s;
  return DTRAIN_BENCH_DIR "/torch_train.py";
}

std::string tf_script_path() {
  if (const char* s = std::getenv("DTRAIN_TF_SCRIPT")) return s;
  return DTRAIN_BENCH_DIR "/tf_train.py";
}

/// The interpreter of the PyPI peers' virtual environment (current torch, tensorflow-cpu), made once by
/// bench/peers/venv.sh under the build tree (or DTRAIN_PEER_VENV); empty when it cannot be made.
std::string peer_venv_python() {
  const char* env = std::getenv("DTRAIN_PEER_VENV");
  const std::string dir = env ? env : DTRAIN_BENCH_BINARY_DIR "/peer-venv";
  const std::string cmd = "sh '" DTRAIN_BENCH_DIR "/peers/venv.sh' '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) return {};
  return dir + "/bin/python";
}

bool has_avx512() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("flags", 0) == 0) return line.find(" avx512f") != std::string::npos;
  return false;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

/// FLOPs of one CNN training step per sample, counted from the GEMMs (2 m n k each):
/// conv: forward + kernel gradient (no input gradient: nothing before it has parameters);
/// dense 21632x128 and dense 128x10: forward, kernel gradient, input gradient.
constexpr double cnn_flop_per_sample() {
  const double conv = 2.0 * 26 * 26 * (3 * 3 * 1) * 32;
  const double d1 = 2.0 * (26 * 26 * 32) * 128;
  const double d2 = 2.0 * 128 * 10;
  return 2 * conv + 3 * d1 + 3 * d2;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string opt_fmt(const char* f, const std::optional<result>& r, bool sps = true) {
  return r ? fmt(f, sps ? r->samples_per_s : r->ms_per_step) : "n/a";
}
std::string ratio(double a, const std::optional<result>& b) {
  return b && b->samples_per_s > 0 ? fmt("%.2fx", a / b->samples_per_s) : "n/a";
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

/// `--rss-child`: one CNN training run in a fresh process; prints its peak RSS in KiB.
int rss_child(std::size_t batch, int threads, int steps) {
  dtrain::set_num_threads(threads);
  cnn model(42);
  compile(model);
  auto [x, y] = make_batch<cnn>(batch);
  for (int i = 0; i < steps; ++i) model.train_step(x, y);
  std::printf("{\"ok\": true, \"vm_hwm_kib\": %ld}\n", vm_hwm_kib());
  return 0;
}

std::optional<long> rss_of(std::vector<std::string> argv, std::vector<std::string> env) {
  child c(std::move(argv), std::move(env));
  c.close_input();
  auto j = c.receive();
  if (!j || !j->value("ok", false)) return std::nullopt;
  return j->value("vm_hwm_kib", 0L);
}

#ifdef DTRAIN_BENCH_CUDA
/// Full training steps of Net on the GPU (dtrain::cuda, graphs on or off), measured as on the CPU; the
/// peak of dtrain's device buffers plus cuBLAS' fixed 32 MiB workspace.
template <class Net>
result run_cuda(std::size_t batch, bool graphs, const timing& t) {
  const dtrain::cuda d(0, dtrain::cuda_options{.graphs = graphs});
  typename Net::template rebind<dtrain::cuda> model(42, d);
  result r = time_steps(model, batch, t);
  r.peak_bytes = static_cast<double>(d.peak_bytes_in_use() + (32 << 20));
  return r;
}

std::string cuda_script_path() {
  if (const char* s = std::getenv("DTRAIN_TORCH_CUDA_SCRIPT")) return s;
  return DTRAIN_BENCH_DIR "/torch_cuda_train.py";
}

/// `--device cuda`: dtrain's cuda backend (graph replay, and every kernel launched) against PyTorch on the
/// same GPU (eager, whole-step CUDA graph, torch.compile), in one invocation.
int cuda_main(const std::vector<std::string>& models, std::vector<std::size_t> batches, const timing& t, bool use_torch,
              bool use_compile) {
  if (dtrain::cuda_device_count() == 0) return std::fprintf(stderr, "train_throughput: no CUDA device\n"), 1;
  if (batches == std::vector<std::size_t>{32, 64, 256}) batches = {64, 256, 1024};
  const dtrain::cuda probe;
  const char* interpreter = std::getenv("DTRAIN_TORCH_PYTHON") ? std::getenv("DTRAIN_TORCH_PYTHON") : "python3";
  std::printf("# train_throughput --device cuda: dtrain %s vs PyTorch on %s; full training steps (forward, backward,"
              " adam, loss and accuracy read back every step)\n",
              dtrain::version, probe.describe().c_str());
  std::printf("# timing: warm-up %.1f s, then median of %d windows of ~%.2f s each; peak = device memory at its peak"
              " (dtrain: buffers + cuBLAS' 32 MiB workspace; torch: max_memory_allocated)\n",
              t.warmup_s, t.windows, t.window_s);
  std::optional<py_peer> peer;
  if (use_torch) {
    peer.emplace(interpreter, cuda_script_path(), torch_env("cuda"), "torch");
    if (peer->ok()) std::printf("# torch %s (%s)\n", peer->version().c_str(), interpreter);
    else std::printf("# torch columns n/a: %s\n", peer->why().c_str());
  }
  std::printf("\n%-8s %6s %12s %12s %12s %12s %12s %10s %10s %10s %11s %11s\n", "model", "batch", "dtrain graph",
              "dtrain eager", "torch eager", "torch graph", "torch comp", "graph/eag", "eager/eag", "graph/tgr",
              "dtrain MiB", "torch MiB");
  for (const auto& m : models)
    for (auto b : batches) {
      const auto run = [&](bool graph) {
        if (m == "cnn") return run_cuda<cnn>(b, graph, t);
        if (m == "transformer") return run_cuda<transformer>(b, graph, t);
        if (m == "lstm") return run_cuda<lstm>(b, graph, t);
        return m == "mlp" ? run_cuda<mlp>(b, graph, t) : run_cuda<resnet20>(b, graph, t);
      };
      const result dg = run(true), dl = run(false);
      std::optional<result> te, tg, tc;
      if (peer) te = peer->run(m, b, "eager", t), tg = peer->run(m, b, "graphs", t);
      if (peer && use_compile) tc = peer->run(m, b, "compile", t);
      auto mib = [](double bytes) { return fmt("%.1f", bytes / (1 << 20)); };
      std::printf("%-8s %6zu %12.0f %12.0f %12s %12s %12s %10s %10s %10s %11s %11s\n", m.c_str(), b, dg.samples_per_s,
                  dl.samples_per_s, opt_fmt("%.0f", te).c_str(), opt_fmt("%.0f", tg).c_str(), opt_fmt("%.0f", tc).c_str(),
                  ratio(dg.samples_per_s, te).c_str(), ratio(dl.samples_per_s, te).c_str(),
                  ratio(dg.samples_per_s, tg).c_str(), mib(dg.peak_bytes).c_str(),
                  te ? mib(te->peak_bytes).c_str() : "n/a");
      std::fflush(stdout);
    }
  return 0;
}
#endif

void usage() {
  std::puts(
      "usage: train_throughput [--quick] [--no-torch] [--no-pypi] [--no-debian-torch] [--no-rss]\n"
      "                        [--models cnn,mlp,resnet20,transformer,lstm (default cnn,mlp)]\n"
      "                        [--batches 32,64,256] [--threads 1,2] [--window SECONDS] [--windows N]\n"
      "                        [--stat median|best] [--device cpu|cuda] [--no-compile]\n"
      "                        [--precision float32,mixed_bfloat16 (the default; also mixed_float16)]\n"
      "Trains each model at each batch size and thread count with dtrain, then current PyTorch and TensorFlow\n"
      "from PyPI (a venv made once under the build tree by bench/peers/venv.sh, or DTRAIN_PEER_VENV) and\n"
      "Debian's PyTorch, each in its best setting, interleaved, and prints one table. --no-torch: no peers.\n"
      "Env DTRAIN_TORCH_SCRIPT, DTRAIN_TF_SCRIPT override the peer scripts.\n"
      "--device cuda: the cuda backend on GPU 0 against PyTorch on it (DTRAIN_TORCH_PYTHON, default python3; batches\n"
      "64,256,1024 unless given; --no-compile leaves out torch.compile).");
}

}  // namespace

int main(int argc, char** argv) {
  timing t;
  bool use_torch = true, use_pypi = true, use_debian = true, rss = true, use_compile = true;
  std::string device = "cpu";
  std::vector<std::string> models{"cnn", "mlp"};
  std::vector<std::size_t> batches{32, 64, 256};
  std::vector<int> thread_counts{1, 2};
  std::vector<std::string> precisions{"float32", "mixed_bfloat16"};
  const int rss_steps = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(), std::exit(2);
      return argv[++i];
    };
    if (a == "--rss-child") {
      const auto b = std::stoul(next());
      const int th = std::stoi(next());
      return rss_child(b, th, std::stoi(next()));
    } else if (a == "--quick") {
      t = {.window_s = 0.1, .windows = 3, .warmup_s = 0.2};
    } else if (a == "--no-torch") {  // no peers at all
      use_torch = use_pypi = use_debian = false;
    } else if (a == "--no-pypi") {
      use_pypi = false;
    } else if (a == "--no-debian-torch") {
      use_debian = false;
    } else if (a == "--no-rss") {
      rss = false;
    } else if (a == "--models") {
      models = split(next());
    } else if (a == "--batches") {
      batches.clear();
      for (auto& s : split(next())) batches.push_back(std::stoul(s));
    } else if (a == "--threads") {
      thread_counts.clear();
      for (auto& s : split(next())) thread_counts.push_back(std::stoi(s));
    } else if (a == "--window") {
      t.window_s = std::stod(next());
    } else if (a == "--windows") {
      t.windows = std::stoi(next());
    } else if (a == "--device") {
      device = next();
      if (device != "cpu" && device != "cuda") usage(), std::exit(2);
    } else if (a == "--precision") {
      precisions = split(next());
    } else if (a == "--no-compile") {
      use_compile = false;
    } else if (a == "--stat") {
      const std::string v = next();
      if (v != "best" && v != "median") usage(), std::exit(2);
      t.best = v == "best";
    } else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  for (auto& m : models)
    if (std::find(known_models.begin(), known_models.end(), m) == known_models.end())
      return std::fprintf(stderr, "unknown model %s (cnn, mlp, resnet20, transformer, lstm)\n", m.c_str()), 2;
  if (models.empty() || batches.empty() || thread_counts.empty())
    return std::fprintf(stderr, "train_throughput: --models, --batches and --threads need at least one value\n"), 2;
  for (int th : thread_counts)
    if (th < 1) return std::fprintf(stderr, "train_throughput: --threads: %d is not a positive count\n", th), 2;
  for (const auto& p : precisions) try {
      dtrain::dtype_policy{p};
    } catch (const std::exception& e) {
      return std::fprintf(stderr, "train_throughput: --precision: %s\n", e.what()), 2;
    }
  if (precisions.empty()) return std::fprintf(stderr, "train_throughput: --precision needs at least one value\n"), 2;

  if (device == "cuda") {
#ifdef DTRAIN_BENCH_CUDA
    return cuda_main(models, batches, t, use_torch, use_compile);
#else
    return std::fprintf(stderr, "train_throughput: --device cuda: built without the cuda backend (DTRAIN_CUDA)\n"), 2;
#endif
  }
  (void)use_compile, (void)use_torch;  // --device cuda only
  const bool avx512 = has_avx512();
  const double peak_core = fma_peak_gflops();
  std::printf("# train_throughput: dtrain %s vs PyTorch and TensorFlow, full training steps (forward, backward, adam)\n",
              dtrain::version);
  std::printf("# cpu: %s, %ld cores online, %s, OpenBLAS core %s; dtrain built with: %s\n", cpu_name().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), avx512 ? "avx512f" : "avx2",
              openblas_get_corename ? openblas_get_corename() : "(not OpenBLAS)",
              DTRAIN_BENCH_FLAGS);
  std::printf("# timing: warm-up %.1f s, then median of %d windows of ~%.2f s each\n", t.warmup_s, t.windows,
              t.window_s);
  std::printf("# precision: the dtype policy (torch: the step's forward and loss under autocast to bfloat16 /"
              " float16 with GradScaler for float16; tensorflow: keras.mixed_precision.set_dtype_policy);"
              " dtrain's bfloat16 GEMMs: %s\n",
              dtrain::detail::bf16_gemm_available() ? "AVX512_BF16" : "none (this CPU multiplies in float32)");

  // The peers: current torch and TensorFlow from PyPI (the peer venv), Debian's torch while it is there.
  std::optional<py_peer> torch, deb_torch;
  std::map<int, std::optional<py_peer>> tf;  // TensorFlow fixes its thread pools at start: one per count
  std::string venv_python;
  if (use_pypi) {
    std::fflush(stdout);
    venv_python = peer_venv_python();
    if (venv_python.empty()) std::printf("# torch (PyPI) and tensorflow columns n/a: no peer venv (see above)\n");
  } else {
    std::printf("# torch (PyPI) and tensorflow columns n/a: --no-pypi\n");
  }
  if (!venv_python.empty()) {
    torch.emplace(venv_python, script_path(), torch_env("best"), "torch");
    if (torch->ok())
      std::printf("# torch %s (PyPI, %s): %s, torch.set_num_threads(threads) (MKL, oneDNN), eager\n",
                  torch->version().c_str(), venv_python.c_str(), malloc_tunables);
    else
      std::printf("# torch (PyPI) column n/a: %s\n", torch->why().c_str());
    for (int th : thread_counts)
      tf[th].emplace(venv_python, tf_script_path(), std::vector<std::string>{"DTRAIN_TF_THREADS=" + std::to_string(th)},
                     "tensorflow");
    const auto& tf0 = tf.begin()->second;  // (main refuses an empty --threads)
    if (tf0->ok())
      std::printf("# tensorflow %s (PyPI): Keras 3 model.train_on_batch, intra-op threads = threads, the faster of"
                  " jit_compile auto and off\n",
                  tf0->version().c_str());
    else
      std::printf("# tensorflow column n/a: %s\n", tf0->why().c_str());
  }
  if (use_debian) {
    deb_torch.emplace(python, script_path(), torch_env("best"), "torch");
    if (deb_torch->ok())
      std::printf("# deb torch %s (%s): %s, torch.set_num_threads(1), OpenBLAS gets `threads` threads\n",
                  deb_torch->version().c_str(), python, malloc_tunables);
    else
      std::printf("# deb torch column n/a: %s\n", deb_torch->why().c_str());
  } else {
    std::printf("# deb torch column n/a: --no-torch\n");
  }

  std::printf("\n%-8s %6s %8s %-15s %13s %15s %12s %12s %12s %9s %9s %9s\n", "model", "batch", "threads", "precision",
              "dtrain smp/s", "dtrain ms/step", "torch smp/s", "tf smp/s", "deb torch", "/torch", "/tf", "/deb");
  struct cnn_row {
    std::size_t batch;
    int threads;
    result d;
    std::optional<result> torch, tf;
  };
  std::vector<cnn_row> cnn_rows;
  struct mixed_row {
    std::string model, precision;
    std::size_t batch;
    int threads;
    double ratio;
  };
  std::vector<mixed_row> mixed_rows;  // dtrain under a mixed policy against its float32 row
  for (const auto& m : models)
    for (auto b : batches)
      for (int th : thread_counts) {
        std::optional<double> float32;
        for (const auto& p : precisions) {
          const result d = run_dtrain(m, b, th, p, t);
          // the peers' model names carry the policy: "cnn" (float32) or "cnn:mixed_bfloat16"
          const std::string pm = p == "float32" ? m : m + ":" + p;
          std::optional<result> pt, pf, pd;  // not `c ? run() : nullopt`: GCC 12 then warns maybe-uninitialized
          if (torch) pt = torch->run(pm, b, std::to_string(th), t);
          if (tf.contains(th)) pf = tf[th]->run(pm, b, std::to_string(th), t);
          if (deb_torch) pd = deb_torch->run(pm, b, std::to_string(th), t);
          std::printf("%-8s %6zu %8d %-15s %13.0f %15.2f %12s %12s %12s %9s %9s %9s\n", m.c_str(), b, th, p.c_str(),
                      d.samples_per_s, d.ms_per_step, opt_fmt("%.0f", pt).c_str(), opt_fmt("%.0f", pf).c_str(),
                      opt_fmt("%.0f", pd).c_str(), ratio(d.samples_per_s, pt).c_str(),
                      ratio(d.samples_per_s, pf).c_str(), ratio(d.samples_per_s, pd).c_str());
          std::fflush(stdout);
          if (p == "float32") float32 = d.samples_per_s;
          else if (float32) mixed_rows.push_back({m, p, b, th, d.samples_per_s / *float32});
          if (m == "cnn" && p == "float32") cnn_rows.push_back({b, th, d, pt, pf});
        }
      }
  if (!mixed_rows.empty()) {
    std::printf("\n# dtrain under a mixed policy against dtrain float32 (samples/s ratio, the rows above):\n");
    std::printf("%-8s %6s %8s %-15s %10s\n", "model", "batch", "threads", "precision", "/float32");
    for (const auto& r : mixed_rows)
      std::printf("%-8s %6zu %8d %-15s %9.2fx\n", r.model.c_str(), r.batch, r.threads, r.precision.c_str(), r.ratio);
  }
  torch.reset(), deb_torch.reset(), tf.clear();
  dtrain::set_num_threads(2);

  if (!cnn_rows.empty()) {
    const double f = cnn_flop_per_sample();
    std::printf("\n# CNN FLOPs: %.2f MFLOP per sample per step (forward + backward GEMMs); peak %.1f GFLOP/s per core"
                " (measured: %s FMA loop, 12 independent chains) x threads\n",
                f / 1e6, peak_core, avx512 ? "AVX-512" : "AVX2");
    std::printf("%-6s %8s %16s %10s %14s %10s %12s %10s\n", "batch", "threads", "dtrain GFLOP/s", "% peak",
                "torch GFLOP/s", "% peak", "tf GFLOP/s", "% peak");
    for (const auto& r : cnn_rows) {
      const double peak = peak_core * r.threads;
      auto g = [&](const std::optional<result>& x) { return x ? fmt("%.1f", f * x->samples_per_s / 1e9) : "n/a"; };
      auto pc = [&](const std::optional<result>& x) {
        return x ? fmt("%.1f%%", 100 * f * x->samples_per_s / 1e9 / peak) : "n/a";
      };
      std::printf("%-6zu %8d %16s %10s %14s %10s %12s %10s\n", r.batch, r.threads, g(r.d).c_str(), pc(r.d).c_str(),
                  g(r.torch).c_str(), pc(r.torch).c_str(), g(r.tf).c_str(), pc(r.tf).c_str());
    }
  }

  if (!rss) return 0;
  // Peak memory of a CNN training run (batch 64, 2 threads), each in its own process.
  const std::size_t rb = 64;
  const int rt = 2;
  const std::vector<std::string> rss_args{"rss", "cnn", std::to_string(rb), std::to_string(rt), std::to_string(rss_steps)};
  auto py_rss = [&](const std::string& interpreter, const std::string& script, std::vector<std::string> env) {
    std::vector<std::string> argv{interpreter, script};
    argv.insert(argv.end(), rss_args.begin(), rss_args.end());
    return rss_of(std::move(argv), std::move(env));
  };
  auto d_rss = rss_of({"/proc/self/exe", "--rss-child", std::to_string(rb), std::to_string(rt),
                       std::to_string(rss_steps)},
                      {});
  std::optional<long> pt, pf, pd;
  if (!venv_python.empty()) {
    pt = py_rss(venv_python, script_path(), torch_env("best"));
    pf = py_rss(venv_python, tf_script_path(), {"DTRAIN_TF_THREADS=" + std::to_string(rt)});
  }
  if (use_debian) pd = py_rss(python, script_path(), torch_env("best"));
  auto mib = [](const std::optional<long>& k) { return k ? fmt("%.1f MiB", *k / 1024.0) : std::string("n/a"); };
  std::printf("\n# peak RSS (VmHWM) of a CNN training run, batch %zu, %d threads, %d steps, own process each:\n", rb,
              rt, rss_steps);
  std::printf("dtrain %s   torch %s   tensorflow %s   deb torch %s\n", mib(d_rss).c_str(), mib(pt).c_str(),
              mib(pf).c_str(), mib(pd).c_str());
#ifdef DTRAIN_BENCH_CUDA
  std::printf("# (this train_throughput links cuBLAS for --device cuda, whose libraries alone add ~190 MiB to dtrain's\n"
              "#  figure: configure with -DDTRAIN_CUDA=OFF for the CPU one)\n");
#endif
  return 0;
}
