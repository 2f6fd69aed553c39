// The dtrain side of tests/interop/check_keras_file.py (.keras files between dtrain and Keras 3) and
// check_onnx.py (ONNX files run by onnxruntime), for a convolutional model (`convnet`), one of the layers
// that make images (`decoder`: embedding, transposed convolution, up-sampling), a functional model of
// two inputs and two outputs (`two_inputs`), recurrent layers (`recurrent`: a bidirectional LSTM,
// TimeDistributed, a GRU going backwards), attention (`attention`: causal self-attention and cross-attention) and padded
// sequences (`masked`: Embedding(mask_zero=True) to attention, LSTM, GRU and pooling); the last three
// .keras only.
//   model_files <model> save <dir>: weights drawn at random, the model saved as dir/dtrain.keras (with
//     dtrain::keras) and exported as dir/dtrain.onnx (with dtrain::onnx), with inputs (dir/x0.npy,
//     x1.npy...) and the model's predictions on them (dir/y0.npy, y1.npy...)
//   model_files <model> load <file.keras> <dir>: load_keras into the model, predictions on dir/x*.npy as
//     dir/loaded_y*.npy; a refused file prints load_keras' error and exits 1
#include <cstdio>
#include <string>
#include <string_view>

#ifdef DTRAIN_INTEROP_KERAS_FILE
#include <dtrain/checkpoint/keras_file.hpp>
#endif
#ifdef DTRAIN_INTEROP_ONNX
#include <dtrain/checkpoint/onnx_export.hpp>
#endif
#include <dtrain/dtrain.hpp>

#include "support/helpers.hpp"

using namespace dtrain;
namespace fs = std::filesystem;

using convnet = sequential<input<12, 12>, reshape<12, 12, 1>, zero_padding2d<1, 2>, conv2d<4, 3, relu, strides<2>>,
                           batch_normalization<>, leaky_relu<0.2f>, separable_conv2d<6, 3, linear, padding::same>,
                           depthwise_conv2d<3, relu, padding::same, depth_multiplier<2>>, layer_normalization<>,
                           max_pooling2d<2>, flatten, dropout<0.25f>, dense<8, gelu, l2<0.01f>>, dense<3>, softmax>;
using decoder = sequential<input<4>, embedding<10, 4>, flatten, dense<16, sigmoid>, reshape<4, 4, 1>, up_sampling2d<2>,
                           conv2d_transpose<3, 3, dtrain::tanh, strides<2>, padding::same>, spatial_dropout2d<0.1f>,
                           average_pooling2d<2>, conv2d<4, kernel_size{3, 1}, linear, dilation_rate<2, 1>>,
                           global_max_pooling2d<>, relu, dense<2>>;
struct a;
struct b;
struct h1;
struct h2;
struct sum;
struct both;
struct prod;
struct out;
using two_inputs =
    functional<inputs<node<a, input<6>>, node<b, input<3>>>, node<h1, dense<6, dtrain::tanh>, a>,
               node<h2, dense<6, sigmoid>, h1>, node<sum, add, a, h2>, node<both, concatenate, sum, b>,
               node<prod, multiply, h2, h1>, node<out, dense<2>, both>, outputs<prod, out>>;

using recurrent = sequential<input<6, 3>, bidirectional<lstm<5, return_sequences<true>>>,
                             time_distributed<dense<3, relu>>, gru<4, go_backwards<true>>, dense<2>>;
struct text;
struct memory;
struct attended;
struct crossed;
using attention = functional<inputs<node<text, input<4, 6>>, node<memory, input<5, 8>>>,
                             node<attended, multi_head_attention<2, 3, use_causal_mask<true>>, text>,
                             node<crossed, multi_head_attention<2, 4>, attended, memory>,
                             node<void, add, attended, crossed>, layer_normalization<>, dense<3>>;
// padded sequences: the mask of Embedding(mask_zero=True) through attention (with dropout, the identity
// in inference), the residual add and the normalization to an LSTM, a GRU (its last step) and a pooling
struct emb;
struct att;
struct normed;
struct last;
struct pooled;
using masked = functional<input<7>, node<emb, embedding<10, 6, mask_zero<true>>>,
                          node<att, multi_head_attention<2, 3, dropout<0.1f>>>,
                          node<void, add, emb, att>, node<normed, layer_normalization<>>,
                          lstm<5, return_sequences<true>, go_backwards<true>>,
                          node<last, gru<4>>, node<pooled, global_average_pooling1d<>, normed>,
                          node<void, concatenate, last, pooled>, dense<2>>;

template <class Model>
std::vector<tensor> draw_inputs() {
  rng r(3);
  std::vector<tensor> xs;
  for (const auto& shape : Model::input_shapes()) {
    std::vector<std::size_t> e{5};
    e.insert(e.end(), shape.begin(), shape.end());
    tensor x = zeros(extents(e.begin(), e.end()));
    for (auto& v : x) v = std::is_same_v<Model, decoder> ? float(r.below(10)) : r.normal();  // embedding: indices
    if constexpr (std::is_same_v<Model, masked>)  // indices 1..9, padded (0) at the end, the start or the middle
      for (std::size_t i = 0; i < x.shape()[0]; ++i)
        for (std::size_t t = 0; t < x.shape()[1]; ++t)
          x(i, t) = (i % 3 == 0 && t >= 5) || (i % 3 == 1 && t == 0) || (i % 3 == 2 && t == 3) ? 0.0f : float(1 + r.below(9));
    xs.push_back(std::move(x));
  }
  return xs;
}

template <class Model>
void write_predictions(Model& m, const std::vector<tensor>& xs, const fs::path& dir, const std::string& prefix) {
  std::vector<tensor> ys;
  if constexpr (Model::num_inputs == 1 && Model::num_outputs == 1) ys.push_back(m.predict(xs[0]));
  else if constexpr (Model::num_outputs == 1) ys.push_back(m.predict(xs));
  else ys = m.predict(xs);
  for (std::size_t o = 0; o < ys.size(); ++o) data::write_npy(dir / (prefix + std::to_string(o) + ".npy"), ys[o]);
}

template <class Model>
int run(std::string_view mode, char** argv, const fs::path& dir) {
  if (mode == "save") {
    Model m(1);
    dtrain_test::randomize_weights(m, 7);
#ifdef DTRAIN_INTEROP_KERAS_FILE
    checkpoint::save_keras(m, dir / "dtrain.keras");
#endif
#ifdef DTRAIN_INTEROP_ONNX
    if constexpr (!std::is_same_v<Model, recurrent> && !std::is_same_v<Model, attention> && !std::is_same_v<Model, masked>)
      checkpoint::export_onnx(m, dir / "dtrain.onnx");
#endif
    const auto xs = draw_inputs<Model>();
    for (std::size_t k = 0; k < xs.size(); ++k) data::write_npy(dir / ("x" + std::to_string(k) + ".npy"), xs[k]);
    write_predictions(m, xs, dir, "y");
    return 0;
  }
  std::vector<tensor> xs;
  for (std::size_t k = 0; k < Model::num_inputs; ++k) xs.push_back(data::read_npy(dir / ("x" + std::to_string(k) + ".npy")));
#ifdef DTRAIN_INTEROP_KERAS_FILE
  try {
    auto m = checkpoint::load_keras<Model>(argv[3]);
    write_predictions(m, xs, dir, "loaded_y");
  } catch (const dtrain::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
#else
  (void)argv;
  return 2;
#endif
}

int main(int argc, char** argv) {
  const bool save = argc == 4 && std::string_view(argv[2]) == "save";
  const bool load = argc == 5 && std::string_view(argv[2]) == "load";
  if (!save && !load) return 2;
  const std::string_view which = argv[1];
  if (which == "convnet") return run<convnet>(argv[2], argv, argv[argc - 1]);
  if (which == "decoder") return run<decoder>(argv[2], argv, argv[argc - 1]);
  if (which == "two_inputs") return run<two_inputs>(argv[2], argv, argv[argc - 1]);
  if (which == "recurrent") return run<recurrent>(argv[2], argv, argv[argc - 1]);
  if (which == "attention") return run<attention>(argv[2], argv, argv[argc - 1]);
  if (which == "masked") return run<masked>(argv[2], argv, argv[argc - 1]);
  return 2;
}
