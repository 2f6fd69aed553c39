// The example models on 28 x 28 images: the tutorial's CNN, two ResNets and the guide's MLP (the
// examples' --model, and bench/train_throughput's resnet20).
#pragma once

#include <cstddef>
#include <type_traits>

#include <dtrain/dtrain.hpp>

namespace mnist_setup {

/// The tutorial's CNN.
using cnn = dtrain::sequential<dtrain::input<28, 28>,
                               dtrain::reshape<28, 28, 1>,
                               dtrain::conv2d<32, 3, dtrain::relu>,
                               dtrain::flatten,
                               dtrain::dense<128, dtrain::relu>,
                               dtrain::dense<10>>;

/// A small ResNet (a functional model): a stem, a residual block of 16 channels, a block down to 14 x 14
/// x 32 (a strided convolution, the shortcut a strided 1 x 1 convolution), global average pooling and
/// the classifier; batch normalization after every convolution, as in Keras' ResNets.
namespace resnet_nodes {
struct stem;
struct a;
struct a_out;
struct b;
struct shortcut;
}  // namespace resnet_nodes
template <dtrain::batch_normalization_options BN = {}>
using resnet_of = dtrain::functional<
    dtrain::input<28, 28>, dtrain::reshape<28, 28, 1>,
    dtrain::conv2d<16, 3, dtrain::linear, dtrain::padding::same>, dtrain::batch_normalization<BN>,
    dtrain::node<resnet_nodes::stem, dtrain::relu>,
    // block 1: two 3 x 3 convolutions, added to the stem
    dtrain::conv2d<16, 3, dtrain::linear, dtrain::padding::same>, dtrain::batch_normalization<BN>, dtrain::relu,
    dtrain::conv2d<16, 3, dtrain::linear, dtrain::padding::same>, dtrain::node<resnet_nodes::a, dtrain::batch_normalization<BN>>,
    dtrain::node<void, dtrain::add, resnet_nodes::stem, resnet_nodes::a>, dtrain::node<resnet_nodes::a_out, dtrain::relu>,
    // block 2: down to 14 x 14 x 32, the shortcut projected by a strided 1 x 1 convolution
    dtrain::conv2d<32, 3, dtrain::linear, dtrain::strides<2>, dtrain::padding::same>, dtrain::batch_normalization<BN>,
    dtrain::relu, dtrain::conv2d<32, 3, dtrain::linear, dtrain::padding::same>,
    dtrain::node<resnet_nodes::b, dtrain::batch_normalization<BN>>,
    dtrain::node<void, dtrain::conv2d<32, 1, dtrain::linear, dtrain::strides<2>>, resnet_nodes::a_out>,
    dtrain::node<resnet_nodes::shortcut, dtrain::batch_normalization<BN>>,
    dtrain::node<void, dtrain::add, resnet_nodes::b, resnet_nodes::shortcut>, dtrain::relu,
    dtrain::global_average_pooling2d<>, dtrain::dense<10>>;
// momentum 0.9 (PyTorch's default, 0.1 there): Keras' 0.99 moves the moving statistics too slowly for runs
// of a few hundred steps, whose test accuracy then trails the training accuracy far behind.
using resnet = resnet_of<{.momentum = 0.9f}>;

/// ResNet-20 (He et al.'s network for CIFAR-10) on 28 x 28 images: a stem, then three stages of three
/// residual blocks at 16, 32 and 64 channels (28 x 28, 14 x 14, 7 x 7; 19 convolutions and the
/// classifier), global average pooling and the classifier. Every convolution is without bias and
/// followed by batch normalization; a stage's first block halves the image with a strided convolution,
/// its shortcut projected by a strided 1 x 1 convolution.
namespace resnet20_nodes {
template <int I>
struct out;  // block I's output (0: the stem's)
template <int I>
struct residual;  // block I's residual branch
template <int I>
struct shortcut;  // a downsampling block's projected shortcut
}  // namespace resnet20_nodes

/// Residual block I with F channels, from block I - 1's output (Stride 2: down to half the image).
template <int I, std::size_t F, std::size_t Stride, dtrain::batch_normalization_options BN>
using resnet20_block = dtrain::block<
    dtrain::conv2d<F, 3, dtrain::linear, dtrain::strides<Stride>, dtrain::padding::same, dtrain::use_bias<false>>,
    dtrain::batch_normalization<BN>, dtrain::relu,
    dtrain::conv2d<F, 3, dtrain::linear, dtrain::padding::same, dtrain::use_bias<false>>,
    dtrain::node<resnet20_nodes::residual<I>, dtrain::batch_normalization<BN>>,
    std::conditional_t<
        Stride == 1, dtrain::node<void, dtrain::add, resnet20_nodes::out<I - 1>, resnet20_nodes::residual<I>>,
        dtrain::block<dtrain::node<void, dtrain::conv2d<F, 1, dtrain::linear, dtrain::strides<Stride>,
                                                        dtrain::use_bias<false>>,
                                   resnet20_nodes::out<I - 1>>,
                      dtrain::node<resnet20_nodes::shortcut<I>, dtrain::batch_normalization<BN>>,
                      dtrain::node<void, dtrain::add, resnet20_nodes::residual<I>, resnet20_nodes::shortcut<I>>>>,
    dtrain::node<resnet20_nodes::out<I>, dtrain::relu>>;

template <dtrain::batch_normalization_options BN = {}>
using resnet20_of = dtrain::functional<
    dtrain::input<28, 28>, dtrain::reshape<28, 28, 1>,
    dtrain::conv2d<16, 3, dtrain::linear, dtrain::padding::same, dtrain::use_bias<false>>,
    dtrain::batch_normalization<BN>, dtrain::node<resnet20_nodes::out<0>, dtrain::relu>,
    resnet20_block<1, 16, 1, BN>, resnet20_block<2, 16, 1, BN>, resnet20_block<3, 16, 1, BN>,
    resnet20_block<4, 32, 2, BN>, resnet20_block<5, 32, 1, BN>, resnet20_block<6, 32, 1, BN>,
    resnet20_block<7, 64, 2, BN>, resnet20_block<8, 64, 1, BN>, resnet20_block<9, 64, 1, BN>,
    dtrain::global_average_pooling2d<>, dtrain::dense<10>>;
using resnet20 = resnet20_of<{.momentum = 0.9f}>;

/// The distributed-training guide's MLP.
using mlp = dtrain::sequential<dtrain::input<28, 28>,
                               dtrain::flatten,
                               dtrain::dense<256, dtrain::relu>,
                               dtrain::dense<256, dtrain::relu>,
                               dtrain::dense<10>>;

}  // namespace mnist_setup
