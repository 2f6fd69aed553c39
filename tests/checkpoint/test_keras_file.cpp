// Keras' .keras files (checkpoint/keras_file.hpp): the architecture as Keras configures it, every weight
// round-tripped bitwise, another architecture refused naming the first layer that differs, and damaged
// files refused without touching the model. (That Keras itself opens them: interop_keras_file.)
#ifdef DTRAIN_TEST_KERAS_FILE
#include <filesystem>
#include <fstream>

#include "support/helpers.hpp"

#include <dtrain/checkpoint/keras_file.hpp>
#include <dtrain/dtrain.hpp>

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::randomize_weights;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
using convnet = sequential<input<12, 12>, reshape<12, 12, 1>, zero_padding2d<1>, conv2d<4, 3, relu, strides<2>>,
                           batch_normalization<>, leaky_relu<0.2f>, separable_conv2d<6, 3, linear, padding::same>,
                           depthwise_conv2d<3, relu, padding::same, depth_multiplier<2>>, layer_normalization<>,
                           max_pooling2d<2>, flatten, dropout<0.25f>, dense<8, gelu, l2<0.01f>>, dense<3>, softmax>;
using wider = sequential<input<12, 12>, reshape<12, 12, 1>, zero_padding2d<1>, conv2d<5, 3, relu, strides<2>>,
                         batch_normalization<>, leaky_relu<0.2f>, separable_conv2d<6, 3, linear, padding::same>,
                         depthwise_conv2d<3, relu, padding::same, depth_multiplier<2>>, layer_normalization<>,
                         max_pooling2d<2>, flatten, dropout<0.25f>, dense<8, gelu, l2<0.01f>>, dense<3>, softmax>;
using shorter = sequential<input<12, 12>, reshape<12, 12, 1>, zero_padding2d<1>, conv2d<4, 3, relu, strides<2>>>;
struct a;
struct b;
struct h1;
struct h2;
struct sum;
using two_inputs = functional<inputs<node<a, input<6>>, node<b, input<3>>>, node<h1, dense<6, dtrain::tanh>, a>,
                              node<h2, dense<6, dtrain::tanh>, h1>, node<sum, add, a, h2>, node<void, concatenate, sum, b>,
                              dense<2>>;

tensor samples(std::size_t n, std::vector<std::size_t> shape) {
  shape.insert(shape.begin(), n);
  tensor x = zeros(extents(shape.begin(), shape.end()));
  rng r(11);
  for (auto& v : x) v = r.normal();
  return x;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
json layer_config(const json& model, const std::string& name) {
  for (const auto& l : model["config"]["layers"])
    if (l["config"]["name"] == name) return l;
  return {};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(keras_file)

BOOST_AUTO_TEST_CASE(the_architecture_is_written_as_keras_configures_it) {
  convnet m(1);
  const json c = checkpoint::keras_config(m);
  BOOST_TEST(c["class_name"] == "Sequential");
  std::vector<std::string> classes;
  for (const auto& l : c["config"]["layers"]) classes.push_back(l["class_name"]);
  const std::vector<std::string> keras{"InputLayer", "Reshape", "ZeroPadding2D", "Conv2D", "BatchNormalization",
                                       "LeakyReLU", "SeparableConv2D", "DepthwiseConv2D", "LayerNormalization",
                                       "MaxPooling2D", "Flatten", "Dropout", "Dense", "Dense", "Softmax"};
  BOOST_TEST(classes == keras, boost::test_tools::per_element());
  BOOST_TEST(layer_config(c, "input_layer")["config"]["batch_shape"] == json::parse("[null, 12, 12]"));
  const json conv = layer_config(c, "conv2d");
  BOOST_TEST(conv["config"]["filters"] == 4);
  BOOST_TEST(conv["config"]["kernel_size"] == json::parse("[3, 3]"));
  BOOST_TEST(conv["config"]["strides"] == json::parse("[2, 2]"));
  BOOST_TEST(conv["config"]["activation"] == "relu");
  BOOST_TEST(conv["build_config"]["input_shape"] == json::parse("[null, 14, 14, 1]"));  // after the padding
  const json dense = layer_config(c, "dense");
  BOOST_TEST(dense["config"]["units"] == 8);
  BOOST_TEST(dense["config"]["kernel_regularizer"]["class_name"] == "L2");
  BOOST_TEST(dense["config"]["kernel_regularizer"]["config"]["l2"].get<double>() == 0.01);  // the float's shortest form
  BOOST_TEST(dense["config"]["bias_regularizer"].is_null());
  BOOST_TEST(layer_config(c, "dense_1")["config"]["activation"] == "linear");
  BOOST_TEST(layer_config(c, "dropout")["config"]["rate"].get<double>() == 0.25);
  BOOST_TEST(layer_config(c, "depthwise_conv2d")["config"]["depth_multiplier"] == 2);
  BOOST_TEST(layer_config(c, "zero_padding2d")["config"]["padding"] == json::parse("[[1, 1], [1, 1]]"));
  BOOST_TEST(checkpoint::to_json(m) == c.dump());

  two_inputs f(1);
  const json g = checkpoint::keras_config(f);
  BOOST_TEST(g["class_name"] == "Functional");
  BOOST_TEST(g["config"]["input_layers"] == json::parse(R"([["input_layer", 0, 0], ["input_layer_1", 0, 0]])"));
  BOOST_TEST(g["config"]["output_layers"] == json::parse(R"([["dense_2", 0, 0]])"));
  const json add = layer_config(g, "add");  // takes the first input and the second dense layer
  const auto& args = add["inbound_nodes"][0]["args"][0];
  BOOST_TEST(args.size() == 2u);
  BOOST_TEST(args[0]["config"]["keras_history"][0] == "input_layer");
  BOOST_TEST(args[1]["config"]["keras_history"][0] == "dense_1");
  BOOST_TEST(layer_config(g, "concatenate")["build_config"]["input_shape"] == json::parse("[[null, 6], [null, 3]]"));
}

BOOST_AUTO_TEST_CASE(every_weight_round_trips_bitwise_and_predictions_match) {
  temp_dir t;
  convnet m(1);
  randomize_weights(m, 5);
  checkpoint::save_keras(m, t.path / "model.keras");
  convnet back(2);
  checkpoint::load_keras(back, t.path / "model.keras");
  BOOST_TEST(back.get_weights() == m.get_weights(), boost::test_tools::per_element());
  const tensor x = samples(4, {12, 12});
  BOOST_TEST(back.predict(x) == m.predict(x));
  const auto again = checkpoint::load_keras<convnet>(t.path / "model.keras");
  BOOST_TEST(again.get_weights() == m.get_weights(), boost::test_tools::per_element());

  two_inputs f(1);
  randomize_weights(f, 6);
  checkpoint::save_keras(f, t.path / "f.keras");
  const auto g = checkpoint::load_keras<two_inputs>(t.path / "f.keras");
  BOOST_TEST(g.get_weights() == f.get_weights(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(another_architecture_is_refused_naming_the_first_layer_that_differs) {
  temp_dir t;
  convnet m(1);
  checkpoint::save_keras(m, t.path / "model.keras");
  wider w(3);
  const auto before = w.get_weights();
  const std::string e = error_of([&] { checkpoint::load_keras(w, t.path / "model.keras"); });
  BOOST_TEST_MESSAGE(e);
  BOOST_TEST(contains(e, "layer 2 (conv2d"));
  BOOST_TEST(contains(e, "filters = 4 in the file but 5 in the model"));
  BOOST_TEST(w.get_weights() == before);  // refused: nothing changed

  shorter s(1);
  const std::string e2 = error_of([&] { checkpoint::load_keras(s, t.path / "model.keras"); });
  BOOST_TEST(contains(e2, "layer 3 (batch_normalization in the file) is absent from the model"));
  checkpoint::save_keras(s, t.path / "short.keras");
  const std::string e3 = error_of([&] { checkpoint::load_keras(m, t.path / "short.keras"); });
  BOOST_TEST(contains(e3, "layer 3 (batch_normalization) is absent from the file"));

  two_inputs f(1);
  const std::string e4 = error_of([&] { checkpoint::load_keras(f, t.path / "model.keras"); });
  BOOST_TEST(contains(e4, "a model of 1 inputs but the model has 2"));
  BOOST_CHECK_THROW(checkpoint::load_keras(m, t.path / "short.keras"), shape_error);
}

BOOST_AUTO_TEST_CASE(keras_activation_layers_load_as_the_relu_and_softmax_layers) {
  // Keras writes Activation("softmax") where dtrain has its Softmax layer: the same layer
  temp_dir t;
  convnet m(1);
  randomize_weights(m, 8);
  json config = checkpoint::keras_config(m);
  auto& last = config["config"]["layers"].back();
  BOOST_TEST_REQUIRE(last["class_name"] == "Softmax");
  last["class_name"] = "Activation";
  last["config"].erase("axis");
  last["config"]["activation"] = "softmax";
  const auto w = m.get_weights();
  const auto weights = checkpoint::detail::h5_image(checkpoint::weight_views(m, w), "weights");
  const std::string text = config.dump();
  const auto zip = dtrain::detail::zip_archive({{"config.json", text}, {"model.weights.h5", {weights.data(), weights.size()}}}, "m");
  std::ofstream(t.path / "activation.keras", std::ios::binary).write(zip.data(), std::streamsize(zip.size()));
  const auto back = checkpoint::load_keras<convnet>(t.path / "activation.keras");
  BOOST_TEST(back.get_weights() == w);
  last["config"]["activation"] = "tanh";  // another activation is another layer
  const std::string other = config.dump();
  const auto zip2 = dtrain::detail::zip_archive({{"config.json", other}, {"model.weights.h5", {weights.data(), weights.size()}}}, "m");
  std::ofstream(t.path / "tanh.keras", std::ios::binary).write(zip2.data(), std::streamsize(zip2.size()));
  BOOST_TEST(contains(error_of([&] { checkpoint::load_keras<convnet>(t.path / "tanh.keras"); }),
                      "is Activation in the file but Softmax in the model"));
}

BOOST_AUTO_TEST_CASE(damaged_or_incomplete_files_are_refused_and_change_nothing) {
  temp_dir t;
  convnet m(1);
  const auto before = m.get_weights();
  auto refused = [&](const fs::path& p) {
    const std::string e = error_of([&] { checkpoint::load_keras(m, p); });
    BOOST_TEST(m.get_weights() == before);
    return e;
  };
  BOOST_TEST(contains(refused(t.path / "missing.keras"), "missing.keras: cannot open"));
  std::ofstream(t.path / "garbage.keras") << "not a zip archive at all";
  BOOST_TEST(contains(refused(t.path / "garbage.keras"), "garbage.keras: not a zip archive"));

  convnet other(9);
  checkpoint::save_keras(other, t.path / "good.keras");
  const auto size = fs::file_size(t.path / "good.keras");
  fs::copy_file(t.path / "good.keras", t.path / "truncated.keras");
  fs::resize_file(t.path / "truncated.keras", size / 2);
  BOOST_TEST(refused(t.path / "truncated.keras") != "no error");

  // archives put together from parts: the model's config with broken or partial weights
  const std::string config = checkpoint::to_json(m);
  const auto w = m.get_weights();
  auto views = checkpoint::weight_views(m, w);
  auto archive = [&](const std::string& name, const std::vector<std::pair<std::string, std::string_view>>& entries) {
    const auto bytes = dtrain::detail::zip_archive(entries, name);
    std::ofstream(t.path / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return t.path / name;
  };
  BOOST_TEST(contains(refused(archive("noconfig.keras", {{"metadata.json", "{}"}})), "has no config.json"));
  BOOST_TEST(contains(refused(archive("badjson.keras", {{"config.json", "{\"class_name\": "}})), "config.json is not JSON"));
  BOOST_TEST(contains(refused(archive("noweights.keras", {{"config.json", config}})), "has no model.weights.h5"));
  BOOST_TEST(contains(refused(archive("nohdf5.keras", {{"config.json", config}, {"model.weights.h5", "garbage"}})),
                      "not an HDF5 file"));
  const std::string last = views.back().name;
  views.pop_back();
  const auto partial = checkpoint::detail::h5_image(views, "partial");
  BOOST_TEST(contains(refused(archive("partial.keras", {{"config.json", config},
                                                         {"model.weights.h5", {partial.data(), partial.size()}}})),
                      "has no dataset '" + last + "'"));
  views.back().shape = {views.back().data.size(), 1};
  const auto misshaped = checkpoint::detail::h5_image(views, "misshaped");
  BOOST_TEST(contains(refused(archive("misshaped.keras", {{"config.json", config},
                                                           {"model.weights.h5", {misshaped.data(), misshaped.size()}}})),
                      "but the model expects"));
  // a flipped byte inside the stored weights: the zip's CRC catches it
  const auto good = checkpoint::detail::h5_image(checkpoint::weight_views(m, w), "good");
  const fs::path flipped = archive("flipped.keras", {{"config.json", config}, {"model.weights.h5", {good.data(), good.size()}}});
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = std::streamoff(fs::file_size(flipped) / 2);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(char(c ^ 0x10));
  }
  BOOST_TEST(contains(refused(flipped), "is damaged"));
}

BOOST_AUTO_TEST_CASE(saving_replaces_a_file_whole_or_not_at_all) {
  temp_dir t;
  convnet m(1);
  checkpoint::save_keras(m, t.path / "model.keras");
  const std::string e = error_of([&] { checkpoint::save_keras(m, t.path / "no" / "such" / "folder" / "m.keras"); });
  BOOST_TEST(contains(e, "m.keras"));
  BOOST_TEST(!fs::exists(t.path / "no"));
  randomize_weights(m, 4);
  checkpoint::save_keras(m, t.path / "model.keras");  // over the old one
  convnet back(2);
  checkpoint::load_keras(back, t.path / "model.keras");
  BOOST_TEST(back.get_weights() == m.get_weights());
  std::size_t leftovers = 0;
  for (const auto& entry : fs::directory_iterator(t.path)) leftovers += entry.path().filename() != "model.keras";
  BOOST_TEST(leftovers == 0u);
}

// The dtype policy goes into the file as Keras writes it (the model's and each layer's DTypePolicy; an
// in_float32 layer's float32) and comes back with load_keras; a policy dtrain cannot compute in is refused
// naming it, the model untouched.
BOOST_AUTO_TEST_CASE(the_dtype_policy_is_written_and_read_back) {
  using mixed = sequential<input<4>, dense<5, relu>, in_float32<dense<3>>>;
  temp_dir t;
  mixed m(1);
  m.set_dtype_policy(dtype_policy::mixed_bfloat16());
  const json c = checkpoint::keras_config(m);
  BOOST_TEST(c["config"]["dtype"]["config"]["name"] == "mixed_bfloat16");
  BOOST_TEST(c["config"]["dtype"]["class_name"] == "DTypePolicy");
  BOOST_TEST(layer_config(c, "dense")["config"]["dtype"]["config"]["name"] == "mixed_bfloat16");
  BOOST_TEST(layer_config(c, "dense_1")["config"]["dtype"]["config"]["name"] == "float32");
  checkpoint::save_keras(m, t.path / "mixed.keras");
  const auto back = checkpoint::load_keras<mixed>(t.path / "mixed.keras");
  BOOST_TEST(back.dtype_policy().name() == std::string("mixed_bfloat16"));
  BOOST_TEST(back.get_weights() == m.get_weights());
  mixed plain(2);
  checkpoint::save_keras(plain, t.path / "plain.keras");
  mixed into(3);
  into.set_dtype_policy(dtype_policy::mixed_float16());
  checkpoint::load_keras(into, t.path / "plain.keras");
  BOOST_TEST(into.dtype_policy().name() == std::string("float32"));

  json odd = c;  // a policy dtrain has no kernels for
  odd["config"]["dtype"]["config"]["name"] = "int8";
  const auto w = m.get_weights();
  const auto weights = checkpoint::detail::h5_image(checkpoint::weight_views(m, w), "weights");
  const std::string text = odd.dump();
  const auto zip =
      dtrain::detail::zip_archive({{"config.json", text}, {"model.weights.h5", {weights.data(), weights.size()}}}, "m");
  std::ofstream(t.path / "int8.keras", std::ios::binary).write(zip.data(), std::streamsize(zip.size()));
  mixed target(4);
  const auto before = target.get_weights();
  const std::string e = error_of([&] { checkpoint::load_keras(target, t.path / "int8.keras"); });
  BOOST_TEST(contains(e, "int8.keras"), e);
  BOOST_TEST(contains(e, "\"int8\""), e);
  BOOST_TEST(target.get_weights() == before);
  BOOST_TEST(target.dtype_policy().name() == std::string("float32"));
}

BOOST_AUTO_TEST_SUITE_END()
#endif
