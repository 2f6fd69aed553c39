// conv_peers: dtrain's cpu convolutions against oneDNN's and libxsmm's on ResNet-20's shapes (28 x 28
// inputs), one table: per shape and batch, the forward pass and the backward pass (input and kernel
// gradients) in milliseconds, each side's GFLOP/s, and each peer's time over dtrain's (above 1: dtrain is
// faster). Activations are NHWC on all sides (dtrain's layout, which a network keeps from layer to layer);
// oneDNN picks its own weight layout (a reorder of a few kilobytes, left out of its time); libxsmm takes
// dtrain's [kh][kw][c][f] weights as they are (its RSCK format). All sides compute the same convolution:
// each shape's first row says how far each peer's outputs (y, the kernel gradient, the input gradient)
// are from dtrain's, the largest difference over the largest value.
//
// libxsmm (1.17's DNN API, Debian's libxsmm-dev) is a column of its own where it was found at configure
// time (DTRAIN_BENCH_XSMM), "n/a" otherwise.
//
// Threads: DTRAIN_NUM_THREADS for dtrain, OMP_NUM_THREADS for oneDNN (Debian's libdnnl runs OpenMP) and
// for libxsmm (driven from an OpenMP parallel region, one execute_st per thread); bench/README.md runs it
// with both at 1 and at 2. Usage: conv_peers [--batches 64,256] [--rounds 15]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#ifdef DTRAIN_BENCH_XSMM
#include <omp.h>

#include <libxsmm.h>
#include <libxsmm_dnn.h>
#include <libxsmm_dnn_convolution.h>
#include <libxsmm_dnn_tensor.h>
#endif

#include <dtrain/dtrain.hpp>

#include "fma_peak.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct shape_info {
  const char* name;
  int count;  // how many of ResNet-20's 21 convolutions have this shape
  bool input_gradient;  // the stem's input gradient is never computed
};

template <class F>
double time_ms(F&& run) {
  const auto start = clock_type::now();
  run();
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

double median(std::vector<double> t) {
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

std::vector<float> random_values(std::size_t n, dtrain::rng& r) {
  std::vector<float> v(n);
  for (auto& x : v) x = r.normal();
  return v;
}

/// max |a - b| over max |b|: float sums in another order differ by their rounding, relative to the largest
float relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.0f, m = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i])), m = std::max(m, std::abs(b[i]));
  return m > 0.0f ? d / m : d;
}

/// Sums over a network's convolutions: each side's milliseconds and the FLOPs (libxsmm's: negative once a
/// shape had none, so that the total says n/a rather than a sum of the shapes it ran).
struct totals {
  double dtrain_ms = 0, dnnl_ms = 0, xsmm_ms = 0, flop = 0;
};

/// A table cell: the value in `format`, or "n/a" where a peer has none (negative).
std::string cell(const char* format, double v) {
  if (v < 0) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

#ifdef DTRAIN_BENCH_XSMM
/// libxsmm's convolution of one shape, NHWC activations and RSCK filters (= dtrain's [kh][kw][c][f]): 1.17
/// takes both as they are for all three passes, so nothing is converted. Its padding is physical: with
/// pad_h_in = 0 (libxsmm padding itself) 1.17's NHWC weight update comes out wrong (the 3x3 ones at
/// 28 x 28, stem included, and 14 x 14: relative difference 4-7 at batch 8), and "same" at stride 2 pads
/// only below and right, which pad_h (one value for both sides) cannot say. So libxsmm convolves an input
/// with its zero rim already there (pad 0): x is copied into it each step and the input gradient out of its
/// twin, and both copies are timed (a framework would have to do them per step); where a shape has no
/// padding, x and dx are libxsmm's buffers.
template <dtrain::window_geometry G>
class xsmm_conv {
 public:
  /// Reads x, w, dy; writes y, gw, dx (dtrain's shapes and layouts). error() says whether it can run.
  xsmm_conv(std::size_t n, int threads, const float* x, const float* w, const float* dy, float* y, float* gw,
            float* dx)
      : n_(n), threads_(threads), x_(x), dx_(dx) {
    libxsmm_dnn_conv_desc d{};
    d.N = int(n), d.C = int(G.c), d.H = int(hp), d.W = int(wp), d.K = int(G.f), d.R = int(G.kh), d.S = int(G.kw);
    d.u = int(G.sh), d.v = int(G.sw), d.threads = threads;
    d.datatype_in = d.datatype_out = LIBXSMM_DNN_DATATYPE_F32;
    d.buffer_format = LIBXSMM_DNN_TENSOR_FORMAT_NHWC, d.filter_format = LIBXSMM_DNN_TENSOR_FORMAT_RSCK;
    d.algo = LIBXSMM_DNN_CONV_ALGO_DIRECT, d.options = LIBXSMM_DNN_CONV_OPTION_OVERWRITE;  // y = and gw =, not +=
    d.fuse_ops = LIBXSMM_DNN_CONV_FUSE_NONE;
    handle_ = libxsmm_dnn_create_conv_layer(d, &status_);
    if (handle_ == nullptr) return;
    status_ = LIBXSMM_DNN_SUCCESS;  // (a warning, such as a fallback, is no error)
    if (padded) x_pad_.assign(n * hp * wp * G.c, 0.0f), dx_pad_.assign(x_pad_.size(), 0.0f);
    bind(LIBXSMM_DNN_REGULAR_INPUT, padded ? x_pad_.data() : x);
    bind(LIBXSMM_DNN_GRADIENT_INPUT, padded ? dx_pad_.data() : dx);
    bind(LIBXSMM_DNN_REGULAR_OUTPUT, y);
    bind(LIBXSMM_DNN_GRADIENT_OUTPUT, dy);
    bind(LIBXSMM_DNN_REGULAR_FILTER, w);
    bind(LIBXSMM_DNN_GRADIENT_FILTER, gw);
    libxsmm_dnn_err_t s = LIBXSMM_DNN_SUCCESS;
    const std::size_t scratch_size = libxsmm_dnn_get_scratch_size(handle_, LIBXSMM_DNN_COMPUTE_KIND_ALL, &s);
    fail(s);
    if (error() != nullptr) return;
    scratch_ = libxsmm_aligned_malloc(std::max<std::size_t>(scratch_size, 64), 2097152);
    fail(libxsmm_dnn_bind_scratch(handle_, LIBXSMM_DNN_COMPUTE_KIND_ALL, scratch_));
  }
  xsmm_conv(const xsmm_conv&) = delete;
  xsmm_conv& operator=(const xsmm_conv&) = delete;
  ~xsmm_conv() {
    if (handle_ == nullptr) return;
    if (scratch_ != nullptr) {
      libxsmm_dnn_release_scratch(handle_, LIBXSMM_DNN_COMPUTE_KIND_ALL);
      libxsmm_free(scratch_);
    }
    for (const auto& [type, tensor] : tensors_) {
      libxsmm_dnn_release_tensor(handle_, type);
      libxsmm_dnn_destroy_tensor(tensor);
    }
    libxsmm_dnn_destroy_conv_layer(handle_);
  }

  /// nullptr while every call has succeeded, else libxsmm's text for the first error
  const char* error() const {
    return handle_ != nullptr && status_ == LIBXSMM_DNN_SUCCESS ? nullptr : libxsmm_dnn_get_error(status_);
  }

  void forward() {
#pragma omp parallel num_threads(threads_)
    {
      if constexpr (padded) {  // x into the rim's middle (the rim stays zero)
#pragma omp for
        for (std::size_t row = 0; row < n_ * G.h; ++row)
          std::copy_n(x_ + row * G.w * G.c, G.w * G.c, x_pad_.data() + padded_row(row));
      }
      run(LIBXSMM_DNN_COMPUTE_KIND_FWD);
    }
  }

  void backward(bool input_gradient) {
#pragma omp parallel num_threads(threads_)
    {
      if (input_gradient) {
        run(LIBXSMM_DNN_COMPUTE_KIND_BWD);
#pragma omp barrier  // (the passes share the scratch)
        if constexpr (padded) {  // dx out of the rim's middle
#pragma omp for
          for (std::size_t row = 0; row < n_ * G.h; ++row)
            std::copy_n(dx_pad_.data() + padded_row(row), G.w * G.c, dx_ + row * G.w * G.c);
        }
      }
      run(LIBXSMM_DNN_COMPUTE_KIND_UPD);
    }
  }

 private:
  // the rim below and right: none where the last window stops short of the input's end (1x1 at stride 2)
  static constexpr std::size_t pb = std::max(G.h + G.pt, (G.oh - 1) * G.sh + G.kh) - (G.h + G.pt);
  static constexpr std::size_t pr = std::max(G.w + G.pl, (G.ow - 1) * G.sw + G.kw) - (G.w + G.pl);
  static constexpr std::size_t hp = G.h + G.pt + pb, wp = G.w + G.pl + pr;
  static constexpr bool padded = hp != G.h || wp != G.w;

  /// where input row `row` (image row / G.h, line row % G.h) starts in the padded buffer
  static std::size_t padded_row(std::size_t row) {
    return ((row / G.h * hp + row % G.h + G.pt) * wp + G.pl) * G.c;
  }

  void fail(libxsmm_dnn_err_t s) {
    if (s != LIBXSMM_DNN_SUCCESS && status_ == LIBXSMM_DNN_SUCCESS) status_ = s;
  }

  void bind(libxsmm_dnn_tensor_type type, const float* data) {
    libxsmm_dnn_err_t s = LIBXSMM_DNN_SUCCESS;
    libxsmm_dnn_tensor_datalayout* layout = libxsmm_dnn_create_tensor_datalayout(handle_, type, &s);
    if (layout == nullptr) return fail(s);
    libxsmm_dnn_tensor* tensor = libxsmm_dnn_link_tensor(layout, data, &s);
    libxsmm_dnn_destroy_tensor_datalayout(layout);
    if (tensor == nullptr) return fail(s);
    tensors_.emplace_back(type, tensor);
    fail(libxsmm_dnn_bind_tensor(handle_, tensor, type));
  }

  /// this thread's share of a pass (inside the parallel region: libxsmm splits the work by thread id)
  void run(libxsmm_dnn_compute_kind kind) {
    const libxsmm_dnn_err_t s = libxsmm_dnn_execute_st(handle_, kind, 0, omp_get_thread_num());
    if (s != LIBXSMM_DNN_SUCCESS) {
#pragma omp critical(xsmm_conv_error)
      fail(s);
    }
  }

  std::size_t n_;
  int threads_;
  const float* x_;
  float* dx_;
  std::vector<float> x_pad_, dx_pad_;
  libxsmm_dnn_layer* handle_ = nullptr;
  libxsmm_dnn_err_t status_ = LIBXSMM_DNN_SUCCESS;
  std::vector<std::pair<libxsmm_dnn_tensor_type, libxsmm_dnn_tensor*>> tensors_;
  void* scratch_ = nullptr;
};
#endif

/// One shape at one batch: dtrain's kernels, oneDNN's and libxsmm's, each side timed in blocks of its own;
/// adds the shape's count of both passes to `sum`.
template <dtrain::window_geometry G>
void compare(const shape_info& info, std::size_t n, int rounds, totals& sum) {
  using namespace dnnl;
  const dtrain::cpu dev;
  dtrain::rng r(1);
  const std::size_t in = n * G.in_size(), out = n * G.out_size(), kv = G.kernel_values();
  std::vector<float> x = random_values(in, r), w = random_values(kv, r), dy = random_values(out, r);
  std::vector<float> y(out), work(dev.conv2d_workspace<G>(n)), dy_work(out), gw(kv), dx(in);
  std::vector<float> scratch(dev.conv2d_backward_workspace<G>(n, info.input_gradient));

  const auto dtrain_forward = [&] {
    dev.conv2d_forward<G, dtrain::activation_kind::linear>(n, x.data(), w.data(), nullptr, y.data(), nullptr,
                                                            work.data());
  };
  const auto dtrain_backward = [&] {  // (after a copy of dy: backward may overwrite it)
    dev.conv2d_backward<G, dtrain::activation_kind::linear>(n, nullptr, y.data(), dy_work.data(), w.data(),
                                                             work.data(), scratch.data(), gw.data(), nullptr,
                                                             info.input_gradient ? dx.data() : nullptr);
  };

  const engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const auto i = [](std::size_t v) { return memory::dim(v); };
  const memory::dims src_dims{i(n), i(G.c), i(G.h), i(G.w)}, dst_dims{i(n), i(G.f), i(G.oh), i(G.ow)},
      wei_dims{i(G.f), i(G.c), i(G.kh), i(G.kw)}, strides{i(G.sh), i(G.sw)}, pad_l{i(G.pt), i(G.pl)},
      pad_r{i((G.oh - 1) * G.sh + G.kh - G.h - G.pt), i((G.ow - 1) * G.sw + G.kw - G.w - G.pl)};
  const auto f32 = memory::data_type::f32;
  const memory::desc src_md(src_dims, f32, memory::format_tag::nhwc), dst_md(dst_dims, f32, memory::format_tag::nhwc),
      wei_any(wei_dims, f32, memory::format_tag::any), wei_hwio(wei_dims, f32, memory::format_tag::hwio);
  const convolution_forward::primitive_desc fwd_pd(
      convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, src_md, wei_any, dst_md,
                                strides, pad_l, pad_r),
      eng);
  const convolution_backward_data::primitive_desc bwd_data_pd(
      convolution_backward_data::desc(algorithm::convolution_direct, src_md, wei_any, dst_md, strides, pad_l, pad_r),
      eng, fwd_pd);
  const convolution_backward_weights::primitive_desc bwd_weights_pd(
      convolution_backward_weights::desc(algorithm::convolution_direct, src_md, wei_any, dst_md, strides, pad_l,
                                         pad_r),
      eng, fwd_pd);
  std::vector<float> dnnl_y(out), dnnl_dx(in), dnnl_gw(kv);
  memory src(src_md, eng, x.data()), dst(dst_md, eng, dnnl_y.data()), diff_dst(dst_md, eng, dy.data()),
      diff_src(src_md, eng, dnnl_dx.data()), user_w(wei_hwio, eng, w.data()), user_gw(wei_hwio, eng, dnnl_gw.data());
  memory fwd_w(fwd_pd.weights_desc(), eng), bwd_w(bwd_data_pd.weights_desc(), eng),
      diff_w(bwd_weights_pd.diff_weights_desc(), eng);
  reorder(user_w, fwd_w).execute(s, user_w, fwd_w);
  reorder(user_w, bwd_w).execute(s, user_w, bwd_w);
  const convolution_forward fwd(fwd_pd);
  const convolution_backward_data bwd_data(bwd_data_pd);
  const convolution_backward_weights bwd_weights(bwd_weights_pd);
  const auto dnnl_forward = [&] {
    fwd.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, fwd_w}, {DNNL_ARG_DST, dst}});
    s.wait();
  };
  const auto dnnl_backward = [&] {
    if (info.input_gradient)
      bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, bwd_w}, {DNNL_ARG_DIFF_SRC, diff_src}});
    bwd_weights.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, diff_w}});
    s.wait();
  };

  // the same results (and every workspace and kernel warm before the timing)
  dtrain_forward();
  std::copy(dy.begin(), dy.end(), dy_work.begin());
  dtrain_backward();
  dnnl_forward();
  dnnl_backward();
  reorder(diff_w, user_gw).execute(s, diff_w, user_gw);
  s.wait();
  const float diff = std::max({relative_diff(y, dnnl_y), relative_diff(gw, dnnl_gw),
                               info.input_gradient ? relative_diff(dx, dnnl_dx) : 0.0f});

  // libxsmm, where it was built: its own outputs, the same inputs (its warm-up run is the check's)
  double xsmm_diff = -1;
#ifdef DTRAIN_BENCH_XSMM
  std::vector<float> xsmm_y(out), xsmm_dx(in), xsmm_gw(kv);
  xsmm_conv<G> xsmm(n, omp_get_max_threads(), x.data(), w.data(), dy.data(), xsmm_y.data(), xsmm_gw.data(),
                    xsmm_dx.data());
  const auto xsmm_forward = [&] { xsmm.forward(); };
  const auto xsmm_backward = [&] { xsmm.backward(info.input_gradient); };
  if (xsmm.error() == nullptr) {
    xsmm_forward();
    xsmm_backward();
  }
  if (xsmm.error() != nullptr) {  // a shape or pass libxsmm does not take: n/a, its reason on stderr
    std::fprintf(stderr, "conv_peers: libxsmm on %s, batch %zu: %s\n", info.name, n, xsmm.error());
  } else {
    xsmm_diff = std::max({relative_diff(xsmm_y, y), relative_diff(xsmm_gw, gw),
                          info.input_gradient ? relative_diff(xsmm_dx, dx) : 0.0f});
  }
#endif

  // Each side's rounds in a block of their own, after a pause: the two thread pools must not meet
  // (oneDNN's OpenMP threads spin for milliseconds after each call, on the core dtrain's pool needs).
  std::vector<double> t[6];
  const auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
  pause();
  for (int round = 0; round < rounds; ++round) {
    t[0].push_back(time_ms(dtrain_forward));
    std::copy(dy.begin(), dy.end(), dy_work.begin());
    t[2].push_back(time_ms(dtrain_backward));
  }
  pause();
  for (int round = 0; round < rounds; ++round) {
    t[1].push_back(time_ms(dnnl_forward));
    t[3].push_back(time_ms(dnnl_backward));
  }
#ifdef DTRAIN_BENCH_XSMM
  if (xsmm_diff >= 0) {
    pause();
    for (int round = 0; round < rounds; ++round) {
      t[4].push_back(time_ms(xsmm_forward));
      t[5].push_back(time_ms(xsmm_backward));
    }
  }
#endif
  const auto xsmm_med = [&](int i) { return t[i].empty() ? -1.0 : median(t[i]); };
  const double med[6] = {median(t[0]), median(t[1]), median(t[2]), median(t[3]), xsmm_med(4), xsmm_med(5)};
  const double flops = 2.0 * double(n) * double(G.out_size()) * double(G.taps());
  const double back = info.input_gradient ? 2.0 : 1.0;
  const auto gflops = [](double f, double ms) { return ms < 0 ? -1.0 : f / ms * 1e-6; };
  const auto ratio = [](double ms, double dtrain_ms) { return ms < 0 ? -1.0 : ms / dtrain_ms; };
  std::printf("| %s | %d | %zu | forward | %.3f | %.3f | %s | %.1f | %.1f | %s | %.2f | %s | %.1e | %s |\n", info.name,
              info.count, n, med[0], med[1], cell("%.3f", med[4]).c_str(), flops / med[0] * 1e-6,
              flops / med[1] * 1e-6, cell("%.1f", gflops(flops, med[4])).c_str(), med[1] / med[0],
              cell("%.2f", ratio(med[4], med[0])).c_str(), diff, cell("%.1e", xsmm_diff).c_str());
  std::printf("| %s | %d | %zu | backward | %.3f | %.3f | %s | %.1f | %.1f | %s | %.2f | %s | | |\n", info.name,
              info.count, n, med[2], med[3], cell("%.3f", med[5]).c_str(), back * flops / med[2] * 1e-6,
              back * flops / med[3] * 1e-6, cell("%.1f", gflops(back * flops, med[5])).c_str(), med[3] / med[2],
              cell("%.2f", ratio(med[5], med[2])).c_str());
  std::fflush(stdout);
  sum.dtrain_ms += info.count * (med[0] + med[2]);
  sum.dnnl_ms += info.count * (med[1] + med[3]);
  sum.xsmm_ms = sum.xsmm_ms < 0 || med[4] < 0 ? -1.0 : sum.xsmm_ms + info.count * (med[4] + med[5]);
  sum.flop += info.count * (1.0 + back) * flops;
}

template <class In, std::size_t F, std::size_t K, std::size_t S, class Padding>
constexpr dtrain::window_geometry resnet_conv =
    dtrain::detail::window2d<In, dtrain::detail::window_layer::conv2d, K, dtrain::strides<S>, Padding>::with_outputs(F);

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> batches{64, 256};
  int rounds = 15;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string flag = argv[a], value = argv[a + 1];
    if (flag == "--rounds") {
      rounds = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--batches") {
      batches.clear();
      for (std::size_t p = 0; p < value.size();) {
        const std::size_t q = std::min(value.find(',', p), value.size());
        batches.push_back(std::strtoul(value.substr(p, q - p).c_str(), nullptr, 10));
        p = q + 1;
      }
      if (batches.empty() || std::find(batches.begin(), batches.end(), 0) != batches.end()) {
        std::fprintf(stderr, "conv_peers: --batches takes positive sizes, such as 64,256\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: conv_peers [--batches 64,256] [--rounds 15]\n");
      return 2;
    }
  }
  using dtrain::shape;
  using same = dtrain::padding::same;
  using valid = dtrain::padding::valid;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int threads = dtrain::num_threads();
  const double peak = fma_peak_gflops() * threads;
#ifdef DTRAIN_BENCH_XSMM
  libxsmm_init();
  const std::string xsmm_version = LIBXSMM_VERSION;
#else
  const std::string xsmm_version = "(not built)";
#endif
  std::printf("dtrain %d thread(s), oneDNN %d.%d.%d, libxsmm %s, OMP_NUM_THREADS=%s, cpu isa %s, measured FMA peak "
              "%.1f GFLOP/s (%d threads); median of %d rounds\n\n",
              threads, dnnl::version()->major, dnnl::version()->minor, dnnl::version()->patch, xsmm_version.c_str(),
              omp ? omp : "(unset)", dtrain::detail::name_of(dtrain::detail::best_cpu_isa()), peak, threads, rounds);
  std::printf("| convolution | in ResNet-20 | batch | pass | dtrain ms | oneDNN ms | libxsmm ms | dtrain GFLOP/s "
              "| oneDNN GFLOP/s | libxsmm GFLOP/s | oneDNN / dtrain | libxsmm / dtrain | oneDNN apart | libxsmm apart "
              "|\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<totals> sums(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const std::size_t n = batches[b];
    totals& sum = sums[b];
    compare<resnet_conv<shape<28, 28, 1>, 16, 3, 1, same>>(
        {"28x28x1 -> 16, 3x3 (stem)", 1, false}, n, rounds, sum);
    compare<resnet_conv<shape<28, 28, 16>, 16, 3, 1, same>>(
        {"28x28x16 -> 16, 3x3", 6, true}, n, rounds, sum);
    compare<resnet_conv<shape<28, 28, 16>, 32, 3, 2, same>>(
        {"28x28x16 -> 32, 3x3 s2", 1, true}, n, rounds, sum);
    compare<resnet_conv<shape<28, 28, 16>, 32, 1, 2, valid>>(
        {"28x28x16 -> 32, 1x1 s2", 1, true}, n, rounds, sum);
    compare<resnet_conv<shape<14, 14, 32>, 32, 3, 1, same>>(
        {"14x14x32 -> 32, 3x3", 5, true}, n, rounds, sum);
    compare<resnet_conv<shape<14, 14, 32>, 64, 3, 2, same>>(
        {"14x14x32 -> 64, 3x3 s2", 1, true}, n, rounds, sum);
    compare<resnet_conv<shape<14, 14, 32>, 64, 1, 2, valid>>(
        {"14x14x32 -> 64, 1x1 s2", 1, true}, n, rounds, sum);
    compare<resnet_conv<shape<7, 7, 64>, 64, 3, 1, same>>(
        {"7x7x64 -> 64, 3x3", 5, true}, n, rounds, sum);
  }
  std::printf("\nResNet-20's 21 convolutions, forward and backward:\n\n| batch | dtrain ms | oneDNN ms | libxsmm ms | "
              "dtrain GFLOP/s | %% of peak | oneDNN GFLOP/s | %% of peak | libxsmm GFLOP/s | %% of peak | oneDNN / "
              "dtrain | libxsmm / dtrain |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
              "|\n");
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const totals& t = sums[b];
    const double gd = t.flop / t.dtrain_ms * 1e-6, go = t.flop / t.dnnl_ms * 1e-6;
    const double gx = t.xsmm_ms < 0 ? -1.0 : t.flop / t.xsmm_ms * 1e-6;
    std::printf("| %zu | %.1f | %.1f | %s | %.1f | %.0f %% | %.1f | %.0f %% | %s | %s | %.2f | %s |\n", batches[b],
                t.dtrain_ms, t.dnnl_ms, cell("%.1f", t.xsmm_ms).c_str(), gd, 100 * gd / peak, go, 100 * go / peak,
                cell("%.1f", gx).c_str(), cell("%.0f %%", gx < 0 ? -1.0 : 100 * gx / peak).c_str(),
                t.dnnl_ms / t.dtrain_ms, cell("%.2f", t.xsmm_ms < 0 ? -1.0 : t.xsmm_ms / t.dtrain_ms).c_str());
  }
}
