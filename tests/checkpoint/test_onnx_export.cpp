// The ONNX export (checkpoint/onnx_export.hpp), checked offline by ONNX's own checker and shape
// inference (libonnx): every model exported is a valid opset-17 graph whose inferred output shapes are
// the model's, and the file is written whole. (That a runtime computes what dtrain does: interop_onnx.)
#ifdef DTRAIN_TEST_ONNX
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>
#include <fstream>

#include "support/helpers.hpp"

#include <dtrain/checkpoint/onnx_export.hpp>
#include <dtrain/dtrain.hpp>

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::randomize_weights;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;

namespace {
using convnet = sequential<input<12, 12>, reshape<12, 12, 1>, zero_padding2d<1>, conv2d<4, 3, relu, strides<2>>,
                           batch_normalization<>, leaky_relu<0.2f>, separable_conv2d<6, 3, linear, padding::same>,
                           depthwise_conv2d<3, relu, padding::same, depth_multiplier<2>>, layer_normalization<>,
                           average_pooling2d<2, padding::same>, flatten, dropout<0.25f>, dense<8, gelu>, dense<3>, softmax>;
using decoder = sequential<input<4>, embedding<10, 4>, flatten, dense<16, sigmoid>, reshape<4, 4, 1>, up_sampling2d<2>,
                           conv2d_transpose<3, 3, dtrain::tanh, strides<2>, padding::same>, max_pooling2d<3, strides<2>>,
                           conv2d<4, kernel_size{3, 1}, linear, dilation_rate<2, 1>, groups<1>>,
                           global_average_pooling2d<true>, relu, dense<2>>;
struct a;
struct b;
struct h;
struct sum;
struct out;
struct prod;
using two_inputs = functional<inputs<node<a, input<6>>, node<b, input<3>>>, node<h, dense<6, dtrain::tanh>, a>,
                              node<sum, add, a, h>, node<out, concatenate, sum, b>, node<prod, multiply, h, a>,
                              outputs<out, prod>>;

/// Checks `m`'s export with ONNX's checker, and that shape inference, strict, from the inputs alone (the
/// declared output shapes cleared), gives the model's output shapes.
template <class Model>
void check_export(const Model& m) {
  onnx::ModelProto p = checkpoint::onnx_model(m);
  BOOST_CHECK_NO_THROW(onnx::checker::check_model(p));
  for (auto& o : *p.mutable_graph()->mutable_output()) o.mutable_type()->mutable_tensor_type()->clear_shape();
  onnx::ShapeInferenceOptions strict(true, 1, true);
  BOOST_CHECK_NO_THROW(onnx::shape_inference::InferShapes(p, onnx::OpSchemaRegistry::Instance(), strict));
  BOOST_TEST_REQUIRE(std::size_t(p.graph().output_size()) == Model::num_outputs);
  for (std::size_t o = 0; o < Model::num_outputs; ++o) {
    const auto& shape = p.graph().output(int(o)).type().tensor_type().shape();
    const auto& want = Model::output_shapes()[o];
    BOOST_TEST_REQUIRE(std::size_t(shape.dim_size()) == want.size() + 1);  // (0 when nothing was inferred)
    for (std::size_t d = 0; d < want.size(); ++d) BOOST_TEST(shape.dim(int(d + 1)).dim_value() == std::int64_t(want[d]));
  }
  // every intermediate tensor got a shape too: the graph is connected and typed throughout
  BOOST_TEST(p.graph().value_info_size() > 0);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(onnx_export)

BOOST_AUTO_TEST_CASE(exports_are_valid_onnx_with_the_models_output_shapes) {
  convnet c(1);
  check_export(c);
  decoder d(1);
  check_export(d);
  two_inputs f(1);
  check_export(f);
  const auto p = checkpoint::onnx_model(f);
  BOOST_TEST(p.graph().input(0).name() == "input_layer");
  BOOST_TEST(p.graph().input(1).name() == "input_layer_1");
  BOOST_TEST(p.graph().output(0).name() == "concatenate");
  BOOST_TEST(p.graph().output(1).name() == "multiply");
}

BOOST_AUTO_TEST_CASE(the_weights_are_in_the_graph) {
  sequential<input<5>, dense<3, relu>, dense<2>> m(1);
  randomize_weights(m, 3);
  const auto p = checkpoint::onnx_model(m);
  const auto w = m.get_weights();
  std::vector<float> in_graph;
  for (const auto& t : p.graph().initializer()) {
    BOOST_TEST(t.data_type() == onnx::TensorProto::FLOAT);
    const auto* f = reinterpret_cast<const float*>(t.raw_data().data());
    in_graph.insert(in_graph.end(), f, f + t.raw_data().size() / sizeof(float));
  }
  BOOST_TEST(in_graph == w, boost::test_tools::per_element());  // kernel, bias, kernel, bias: unchanged
}

BOOST_AUTO_TEST_CASE(the_file_is_written_whole_and_reads_back) {
  temp_dir t;
  convnet m(1);
  checkpoint::export_onnx(m, t.path / "model.onnx");
  onnx::ModelProto back;
  std::ifstream in(t.path / "model.onnx", std::ios::binary);
  BOOST_TEST_REQUIRE(back.ParseFromIstream(&in));
  BOOST_TEST(back.producer_name() == "dtrain");
  BOOST_CHECK_NO_THROW(onnx::checker::check_model(back));
  const std::string e = error_of([&] { checkpoint::export_onnx(m, t.path / "missing" / "model.onnx"); });
  BOOST_TEST(e.find("model.onnx") != std::string::npos);
  BOOST_TEST(!fs::exists(t.path / "missing"));
}

// an embedding's mask would change what the layers after it compute; the graph has no masks: refused
BOOST_AUTO_TEST_CASE(an_embedding_with_mask_zero_is_refused) {
  sequential<input<5>, embedding<10, 4, mask_zero<true>>, global_average_pooling1d<>, dense<2>> m(1);
  const std::string e = error_of([&] { (void)checkpoint::onnx_model(m); });
  BOOST_TEST(e.find("mask_zero") != std::string::npos, e);
  BOOST_TEST(e.find("'embedding") != std::string::npos, e);
}

BOOST_AUTO_TEST_SUITE_END()
#endif
