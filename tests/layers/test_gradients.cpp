// Numeric gradient checks for every layer (tolerance in support/gradcheck.hpp), on odd shapes,
// batch 1 and an odd batch.
#include "support/gradcheck.hpp"

using namespace dtrain;
using dtrain_test::check_layer_gradients;

BOOST_AUTO_TEST_SUITE(layer_gradients)

BOOST_AUTO_TEST_CASE(dense_each_activation) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<bind_t<dense<4>, shape<7>>>("dense linear", n);
    check_layer_gradients<bind_t<dense<5, relu>, shape<7>>>("dense relu", n);
    check_layer_gradients<bind_t<dense<3, sigmoid>, shape<6>>>("dense sigmoid", n);
    check_layer_gradients<bind_t<dense<3, dtrain::tanh>, shape<6>>>("dense tanh", n);
    check_layer_gradients<bind_t<dense<4, softmax>, shape<5>>>("dense softmax", n);
    check_layer_gradients<bind_t<dense<4, gelu>, shape<5>>>("dense gelu", n);
  }
}

BOOST_AUTO_TEST_CASE(dense_on_rank3_input_acts_on_last_axis) {
  check_layer_gradients<bind_t<dense<3, relu>, shape<2, 3, 5>>>("dense rank-3", 2);
}

BOOST_AUTO_TEST_CASE(conv2d_padding_and_strides) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<bind_t<conv2d<4, 3>, shape<6, 5, 3>>>("conv2d valid", n);
    check_layer_gradients<bind_t<conv2d<2, 3, relu, padding::same>, shape<5, 7, 2>>>("conv2d same relu", n);
    check_layer_gradients<bind_t<conv2d<3, 3, linear, strides<2>, padding::same>, shape<7, 6, 2>>>("conv2d same s2", n);
    check_layer_gradients<bind_t<conv2d<2, 2, dtrain::tanh, strides<2, 1>>, shape<5, 5, 1>>>("conv2d valid s2x1", n);
    check_layer_gradients<bind_t<conv2d<3, 1, gelu>, shape<3, 4, 5>>>("conv2d 1x1 gelu", n);
  }
}

BOOST_AUTO_TEST_CASE(pooling) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<bind_t<max_pooling2d<2>, shape<6, 5, 3>>>("max_pooling2d valid", n);
    check_layer_gradients<bind_t<max_pooling2d<3, strides<2>, padding::same>, shape<7, 5, 2>>>("max_pooling2d same", n);
    check_layer_gradients<bind_t<average_pooling2d<2>, shape<6, 5, 3>>>("average_pooling2d valid", n);
    check_layer_gradients<bind_t<average_pooling2d<3, strides<2>, padding::same>, shape<7, 5, 2>>>(
        "average_pooling2d same", n);
  }
}

BOOST_AUTO_TEST_CASE(standalone_activations) {
  for (std::size_t n : {1, 3}) {
    check_layer_gradients<bind_t<relu, shape<9>>>("relu", n);
    check_layer_gradients<bind_t<sigmoid, shape<9>>>("sigmoid", n);
    check_layer_gradients<bind_t<dtrain::tanh, shape<9>>>("tanh", n);
    check_layer_gradients<bind_t<softmax, shape<2, 5>>>("softmax", n);
    check_layer_gradients<bind_t<gelu, shape<9>>>("gelu", n);
  }
}

BOOST_AUTO_TEST_CASE(reshape_flatten_dropout) {
  check_layer_gradients<bind_t<reshape<3, 4>, shape<12>>>("reshape", 3);
  check_layer_gradients<bind_t<flatten, shape<2, 3, 2>>>("flatten", 3);
  check_layer_gradients<bind_t<dropout<0.3f>, shape<11>>>("dropout", 3);
}

BOOST_AUTO_TEST_SUITE_END()
