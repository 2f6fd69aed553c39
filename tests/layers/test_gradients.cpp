// Numeric gradient checks for every layer (tolerance in support/gradcheck.hpp), on odd shapes,
// batch 1 and an odd batch, on every backend of the suite.
#include "support/gradcheck.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::check_layer_gradients;

BOOST_AUTO_TEST_SUITE(layer_gradients)

BOOST_AUTO_TEST_CASE_TEMPLATE(dense_each_activation, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<dense<4>, shape<7>, B>("dense linear", n);
    check_layer_gradients<dense<5, relu>, shape<7>, B>("dense relu", n);
    check_layer_gradients<dense<3, sigmoid>, shape<6>, B>("dense sigmoid", n);
    check_layer_gradients<dense<3, dtrain::tanh>, shape<6>, B>("dense tanh", n);
    check_layer_gradients<dense<4, relu, use_bias<false>>, shape<7>, B>("dense relu, no bias", n);
    check_layer_gradients<dense<3, gelu, use_bias<false>>, shape<2, 5>, B>("dense gelu on rows, no bias", n);
    check_layer_gradients<dense<4, softmax>, shape<5>, B>("dense softmax", n);
    check_layer_gradients<dense<4, gelu>, shape<5>, B>("dense gelu", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dense_on_rank3_input_acts_on_last_axis, B, backends) {
  check_layer_gradients<dense<3, relu>, shape<2, 3, 5>, B>("dense rank-3", 2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_padding_and_strides, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<conv2d<4, 3>, shape<6, 5, 3>, B>("conv2d valid", n);
    check_layer_gradients<conv2d<2, 3, relu, padding::same>, shape<5, 7, 2>, B>("conv2d same relu", n);
    check_layer_gradients<conv2d<3, 3, linear, strides<2>, padding::same>, shape<7, 6, 2>, B>("conv2d same s2", n);
    check_layer_gradients<conv2d<2, 2, dtrain::tanh, strides<2, 1>>, shape<5, 5, 1>, B>("conv2d valid s2x1", n);
    check_layer_gradients<conv2d<3, 1, gelu>, shape<3, 4, 5>, B>("conv2d 1x1 gelu", n);
    check_layer_gradients<conv2d<10, 3, dtrain::tanh, padding::same>, shape<6, 5, 1>, B>("conv2d same tanh, one channel", n);
    check_layer_gradients<conv2d<3, 3, relu, padding::same, use_bias<false>>, shape<5, 4, 2>, B>("conv2d no bias", n);
    check_layer_gradients<conv2d<2, 3, gelu, strides<2>, use_bias<false>>, shape<5, 5, 3>, B>("conv2d no bias gelu", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_kernel_shapes_dilation_groups, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<conv2d<3, kernel_size{3, 2}, relu, strides<2, 1>>, shape<7, 5, 2>, B>("conv2d 3x2 s2x1", n);
    check_layer_gradients<conv2d<2, kernel_size{1, 3}, gelu, padding::same>, shape<4, 5, 3>, B>("conv2d 1x3 same", n);
    check_layer_gradients<conv2d<3, 3, dtrain::tanh, dilation_rate<2>>, shape<7, 6, 2>, B>("conv2d dilation 2", n);
    check_layer_gradients<conv2d<2, 3, relu, dilation_rate<2, 1>, padding::same>, shape<6, 5, 2>, B>(
        "conv2d dilation 2x1 same", n);
    check_layer_gradients<conv2d<4, 3, relu, groups<2>, padding::same>, shape<5, 4, 6>, B>("conv2d groups 2", n);
    check_layer_gradients<conv2d<6, 2, linear, groups<3>, strides<2>, use_bias<false>>, shape<5, 5, 3>, B>(
        "conv2d groups 3 (depthwise x2), no bias", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv1d_and_global_pooling1d, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<conv1d<3, 3>, shape<7, 2>, B>("conv1d valid", n);
    check_layer_gradients<conv1d<2, 3, gelu, padding::causal>, shape<6, 3>, B>("conv1d causal gelu", n);
    check_layer_gradients<conv1d<2, 2, dtrain::tanh, padding::causal, dilation_rate<2>, strides<2>>, shape<7, 2>, B>(
        "conv1d causal dilated strided", n);
    check_layer_gradients<conv1d<4, 3, relu, padding::same, groups<2>, use_bias<false>>, shape<5, 4>, B>(
        "conv1d same groups, no bias", n);
    check_layer_gradients<max_pooling1d<2>, shape<6, 3>, B>("max_pooling1d", n);
    check_layer_gradients<average_pooling1d<3, strides<2>, padding::same>, shape<7, 2>, B>("average_pooling1d same s2", n);
    check_layer_gradients<global_average_pooling1d<>, shape<5, 3>, B>("global_average_pooling1d", n);
    check_layer_gradients<global_max_pooling1d<true>, shape<4, 2>, B>("global_max_pooling1d keepdims", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_head_attention_with_and_without_the_causal_mask, B, backends) {
  for (std::size_t n : {1, 2}) {
    check_layer_gradients<multi_head_attention<2, 3>, shape<4, 5>, B>("attention", n);
    check_layer_gradients<multi_head_attention<3, 2, use_causal_mask<true>>, shape<5, 4>, B>("attention causal", n);
    check_layer_gradients<multi_head_attention<2, 4, value_dim<3>, use_bias<false>>, shape<3, 8>, B>(
        "attention value_dim 3, no bias", n);
    check_layer_gradients<multi_head_attention<1, 6, use_causal_mask<true>>, shape<1, 6>, B>("attention of one step", n);
    check_layer_gradients<multi_head_attention<2, 3, dropout<0.3f>, use_causal_mask<true>>, shape<5, 4>, B>(
        "attention with dropout, causal", n);
    check_layer_gradients<position_embedding<6>, shape<4, 3>, B>("position_embedding", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(lstm_gru_and_time_distributed, B, backends) {
  for (std::size_t n : {1u, 3u}) {
    check_layer_gradients<lstm<4>, shape<5, 3>, B>("lstm", n);
    check_layer_gradients<lstm<3, return_sequences<true>>, shape<4, 2>, B>("lstm return_sequences", n);
    check_layer_gradients<lstm<2, use_bias<false>>, shape<1, 3>, B>("lstm of one step, no bias", n);
    check_layer_gradients<gru<4>, shape<5, 3>, B>("gru", n);
    check_layer_gradients<gru<3, return_sequences<true>>, shape<4, 2>, B>("gru return_sequences", n);
    check_layer_gradients<gru<2, use_bias<false>>, shape<1, 3>, B>("gru of one step, no bias", n);
    check_layer_gradients<bidirectional<lstm<3>>, shape<4, 2>, B>("bidirectional lstm", n);
    check_layer_gradients<bidirectional<gru<2, return_sequences<true>, use_bias<false>>>, shape<4, 3>, B>(
        "bidirectional gru return_sequences, no bias", n);
    check_layer_gradients<time_distributed<conv2d<3, 2, dtrain::tanh>>, shape<3, 4, 4, 2>, B>("time_distributed conv2d", n);
    check_layer_gradients<time_distributed<dense<3, dtrain::tanh>>, shape<4, 2>, B>("time_distributed dense", n);
  }
}

// Masked inputs (Keras' mask_zero): padding at the end, the start and the middle, and a sample of
// padding only (padding_mask), through the layers that read masks.
BOOST_AUTO_TEST_CASE_TEMPLATE(masked_attention_recurrent_and_pooling, B, backends) {
  using dtrain_test::padding_mask;
  const std::size_t n = 4;
  check_layer_gradients<multi_head_attention<2, 3>, shape<5, 4>, B>("masked attention", n, 7, padding_mask(n, 5));
  check_layer_gradients<multi_head_attention<2, 3, use_causal_mask<true>>, shape<5, 4>, B>("masked causal attention", n, 7,
                                                                                             padding_mask(n, 5));
  check_layer_gradients<lstm<3>, shape<5, 2>, B>("masked lstm", n, 7, padding_mask(n, 5));
  check_layer_gradients<lstm<3, return_sequences<true>>, shape<5, 2>, B>("masked lstm return_sequences", n, 7,
                                                                         padding_mask(n, 5));
  check_layer_gradients<gru<3>, shape<5, 2>, B>("masked gru", n, 7, padding_mask(n, 5));
  check_layer_gradients<lstm<3, go_backwards<true>, return_sequences<true>>, shape<5, 2>, B>("masked lstm backwards", n, 7,
                                                                                             padding_mask(n, 5));
  check_layer_gradients<gru<3, go_backwards<true>>, shape<5, 2>, B>("masked gru backwards", n, 7, padding_mask(n, 5));
  check_layer_gradients<bidirectional<lstm<2, return_sequences<true>>>, shape<5, 2>, B>("masked bidirectional lstm", n, 7,
                                                                                         padding_mask(n, 5));
  check_layer_gradients<gru<3, return_sequences<true>>, shape<5, 2>, B>("masked gru return_sequences", n, 7,
                                                                        padding_mask(n, 5));
  check_layer_gradients<global_average_pooling1d<>, shape<5, 3>, B>("masked global_average_pooling1d", n, 7,
                                                                    padding_mask(n, 5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_transpose_options, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<conv2d_transpose<3, 3>, shape<4, 3, 2>, B>("conv2d_transpose valid", n);
    check_layer_gradients<conv2d_transpose<2, 3, relu, strides<2>, padding::same>, shape<3, 4, 3>, B>(
        "conv2d_transpose same s2 relu", n);
    check_layer_gradients<conv2d_transpose<2, kernel_size{2, 3}, gelu, strides<3, 2>>, shape<3, 3, 2>, B>(
        "conv2d_transpose 2x3 s3x2 (uncovered rows) gelu", n);
    check_layer_gradients<conv2d_transpose<3, 3, dtrain::tanh, dilation_rate<2>, use_bias<false>>, shape<3, 3, 2>, B>(
        "conv2d_transpose dilation 2, no bias", n);
    check_layer_gradients<conv2d_transpose<2, 3, linear, strides<2>, padding::same, output_padding<1>>, shape<3, 4, 2>,
                          B>("conv2d_transpose same s2 output_padding 1", n);
    check_layer_gradients<conv2d_transpose<2, kernel_size{2, 3}, relu, strides<3, 2>, output_padding<2, 1>>,
                          shape<3, 3, 2>, B>("conv2d_transpose valid s3x2 output_padding 2x1 (rows no tap reaches)", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pooling, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<max_pooling2d<2>, shape<6, 5, 3>, B>("max_pooling2d valid", n);
    check_layer_gradients<max_pooling2d<3, strides<2>, padding::same>, shape<7, 5, 2>, B>("max_pooling2d same", n);
    check_layer_gradients<average_pooling2d<2>, shape<6, 5, 3>, B>("average_pooling2d valid", n);
    check_layer_gradients<average_pooling2d<3, strides<2>, padding::same>, shape<7, 5, 2>, B>(
        "average_pooling2d same", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(standalone_activations, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<relu, shape<9>, B>("relu", n);
    check_layer_gradients<sigmoid, shape<9>, B>("sigmoid", n);
    check_layer_gradients<dtrain::tanh, shape<9>, B>("tanh", n);
    check_layer_gradients<softmax, shape<2, 5>, B>("softmax", n);
    check_layer_gradients<gelu, shape<9>, B>("gelu", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reshape_flatten_dropout, B, backends) {
  check_layer_gradients<reshape<3, 4>, shape<12>, B>("reshape", 3);
  check_layer_gradients<flatten, shape<2, 3, 2>, B>("flatten", 3);
  check_layer_gradients<dropout<0.3f>, shape<11>, B>("dropout", 3);
  check_layer_gradients<spatial_dropout2d<0.3f>, shape<3, 2, 5>, B>("spatial_dropout2d", 3);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(global_pooling, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<global_average_pooling2d<>, shape<5, 4, 3>, B>("global_average_pooling2d", n);
    check_layer_gradients<global_average_pooling2d<true>, shape<3, 1, 2>, B>("global_average_pooling2d keepdims", n);
    check_layer_gradients<global_max_pooling2d<>, shape<4, 5, 3>, B>("global_max_pooling2d", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(zero_padding, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<zero_padding2d<>, shape<3, 4, 2>, B>("zero_padding2d 1", n);
    check_layer_gradients<zero_padding2d<2, 0>, shape<3, 4, 2>, B>("zero_padding2d (2, 0)", n);
    check_layer_gradients<zero_padding2d<0, 1, 3, 2>, shape<2, 3, 3>, B>("zero_padding2d (0, 1, 3, 2)", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(up_sampling, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<up_sampling2d<>, shape<3, 4, 2>, B>("up_sampling2d 2", n);
    check_layer_gradients<up_sampling2d<3, 1>, shape<2, 3, 3>, B>("up_sampling2d (3, 1)", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(leaky_relu_slopes, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<leaky_relu<>, shape<9>, B>("leaky_relu 0.3", n);
    check_layer_gradients<leaky_relu<0.01f>, shape<2, 5>, B>("leaky_relu 0.01", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(layer_normalization_axes, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<layer_normalization<>, shape<7>, B>("layer_normalization", n);
    check_layer_gradients<layer_normalization<1e-5f>, shape<3, 2, 5>, B>("layer_normalization rank 3", n);
    check_layer_gradients<layer_normalization<>, shape<4, 1>, B>("layer_normalization one feature", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(batch_normalization_in_training, B, backends) {
  for (std::size_t n : {2, 3}) {
    check_layer_gradients<batch_normalization<>, shape<7>, B>("batch_normalization", n);
    check_layer_gradients<batch_normalization<{.momentum = 0.9f, .epsilon = 1e-5f}>, shape<3, 2, 5>, B>(
        "batch_normalization rank 3", n);
    check_layer_gradients<batch_normalization<{.synchronized = true}>, shape<2, 2, 3>, B>(
        "batch_normalization synchronized, one replica", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(depthwise_and_separable_convolutions, B, backends) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<depthwise_conv2d<3>, shape<5, 6, 2>, B>("depthwise_conv2d valid", n);
    check_layer_gradients<depthwise_conv2d<3, dtrain::tanh, strides<2>, padding::same, depth_multiplier<2>>,
                          shape<5, 6, 3>, B>("depthwise_conv2d same s2 x2 tanh", n);
    check_layer_gradients<separable_conv2d<4, 3, relu, padding::same>, shape<5, 4, 3>, B>("separable_conv2d same relu", n);
    check_layer_gradients<depthwise_conv2d<3, relu, padding::same, use_bias<false>>, shape<5, 4, 3>, B>(
        "depthwise_conv2d no bias", n);
    check_layer_gradients<separable_conv2d<2, kernel_size{3, 2}, gelu, use_bias<false>>, shape<5, 4, 3>, B>(
        "separable_conv2d 3x2 no bias", n);
    check_layer_gradients<separable_conv2d<2, 2, gelu, strides<2>, depth_multiplier<3>>, shape<5, 5, 2>, B>(
        "separable_conv2d s2 x3 gelu", n);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(embedding_table, B, backends) {
  // the indices are not differentiable: only the table's gradient, with indices that repeat (their rows
  // add up) and a table row no index reads (its gradient is zero)
  using L = bind_t<embedding<6, 3>, shape<2, 4>, B>;
  const B device;
  rng r(2);
  L layer;
  std::vector<float> params(param_count_v<L>);
  layer.initialize(params, r);
  const std::vector<float> x{0, 2, 2, 5, 1, 2, 0, 0, 3, 3, 5, 2, 1, 1, 0, 2, 4, 2, 2, 2, 0, 5, 5, 1};  // 3 samples
  const std::size_t n = 3;
  const std::vector<float> proj = dtrain_test::random_vector(n * 8 * 3, r);
  auto xd = dtrain_test::upload(device, x), pd = device.template allocate<float>(params.size());
  auto yd = device.template allocate<float>(proj.size()), gd = device.template allocate<float>(params.size());
  layer_context<B> ctx{device, r, true};
  auto f = [&]() -> double {
    device.upload(params.size(), params.data(), pd.data());
    layer.forward(ctx, xd.data(), yd.data(), n, pd.data());
    const auto y = dtrain_test::download(device, yd);
    double s = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * proj[i];
    return s;
  };
  f();
  auto dyd = dtrain_test::upload(device, proj);
  layer.backward(ctx, xd.data(), yd.data(), dyd.data(), pointer_t<B, float>{}, n, pd.data(), gd.data());
  const auto grads = dtrain_test::download(device, gd);
  dtrain_test::check_gradient("embedding d/dtable", params, grads, f);
}

BOOST_AUTO_TEST_SUITE_END()
