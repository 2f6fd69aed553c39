// conv_peers: dtrain's cpu convolutions against oneDNN's on ResNet-20's shapes (28 x 28 inputs), one
// table: per shape and batch, the forward pass and the backward pass (input and kernel gradients) in
// milliseconds, each side's GFLOP/s, and oneDNN's time over dtrain's (above 1: dtrain is faster).
// Activations are NHWC on both sides (dtrain's layout, which a network keeps from layer to layer);
// oneDNN picks its own weight layout (a reorder of a few kilobytes, left out of its time). Both sides
// compute the same convolution: each shape's first row says how far their outputs (y, the kernel
// gradient, the input gradient) are apart, the largest difference over the largest value.
//
// Threads: DTRAIN_NUM_THREADS for dtrain, OMP_NUM_THREADS for oneDNN (Debian's libdnnl runs OpenMP);
// bench/README.md runs it with both at 1 and at 2. Usage: conv_peers [--batches 64,256] [--rounds 15]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

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

/// Sums over a network's convolutions: each side's milliseconds and the FLOPs.
struct totals {
  double dtrain_ms = 0, dnnl_ms = 0, flop = 0;
};

/// One shape at one batch: dtrain's kernels and oneDNN's, each side timed in blocks of its own; adds the
/// shape's count of both passes to `sum`.
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

  // Each side's rounds in a block of their own, after a pause: the two thread pools must not meet
  // (oneDNN's OpenMP threads spin for milliseconds after each call, on the core dtrain's pool needs).
  std::vector<double> t[4];
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
  const double med[4] = {median(t[0]), median(t[1]), median(t[2]), median(t[3])};
  const double flops = 2.0 * double(n) * double(G.out_size()) * double(G.taps());
  const double back = info.input_gradient ? 2.0 : 1.0;
  std::printf("| %s | %d | %zu | forward | %.3f | %.3f | %.1f | %.1f | %.2f | %.1e |\n", info.name, info.count, n,
              med[0], med[1], flops / med[0] * 1e-6, flops / med[1] * 1e-6, med[1] / med[0], diff);
  std::printf("| %s | %d | %zu | backward | %.3f | %.3f | %.1f | %.1f | %.2f | |\n", info.name, info.count, n, med[2],
              med[3], back * flops / med[2] * 1e-6, back * flops / med[3] * 1e-6, med[3] / med[2]);
  std::fflush(stdout);
  sum.dtrain_ms += info.count * (med[0] + med[2]);
  sum.dnnl_ms += info.count * (med[1] + med[3]);
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
  std::printf("dtrain %d thread(s), oneDNN %d.%d.%d OMP_NUM_THREADS=%s, cpu isa %s, measured FMA peak %.1f GFLOP/s "
              "(%d threads); median of %d rounds\n\n",
              threads, dnnl::version()->major, dnnl::version()->minor, dnnl::version()->patch, omp ? omp : "(unset)",
              dtrain::detail::name_of(dtrain::detail::best_cpu_isa()), peak, threads, rounds);
  std::printf("| convolution | in ResNet-20 | batch | pass | dtrain ms | oneDNN ms | dtrain GFLOP/s | oneDNN GFLOP/s "
              "| oneDNN / dtrain | outputs apart |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
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
  std::printf("\nResNet-20's 21 convolutions, forward and backward:\n\n| batch | dtrain ms | oneDNN ms | dtrain "
              "GFLOP/s | %% of peak | oneDNN GFLOP/s | %% of peak | oneDNN / dtrain |\n| --- | --- | --- | --- | --- "
              "| --- | --- | --- |\n");
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const totals& t = sums[b];
    const double gd = t.flop / t.dtrain_ms * 1e-6, go = t.flop / t.dnnl_ms * 1e-6;
    std::printf("| %zu | %.1f | %.1f | %.1f | %.0f %% | %.1f | %.0f %% | %.2f |\n", batches[b], t.dtrain_ms, t.dnnl_ms,
                gd, 100 * gd / peak, go, 100 * go / peak, t.dnnl_ms / t.dtrain_ms);
  }
}
