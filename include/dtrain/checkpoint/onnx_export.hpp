#pragma once
/// \file
/// `export_onnx(model, "model.onnx")`: Keras' `model.export(path, format="onnx")`, the trained model as an
/// ONNX graph (opset 17) that ONNX runtimes run for inference: a graph input per model input (batch size
/// free), a graph output per model output, named as Keras names the layers. Built with ONNX's own
/// protobuf classes (Debian: libonnx-dev) and written atomically; needs the `dtrain::onnx` target.
///
/// The graph is made from the model's Keras config (keras_config.hpp, the layers'
/// `get_config`) and its weights, layer by layer, in inference mode (dropout is the identity, batch
/// normalization its moving statistics folded into a per-channel scale and shift). dtrain keeps images
/// channels last; ONNX convolutions and pooling take channels first, so each of those layers is wrapped
/// in two transposes (runtimes fuse them away where they can). A layer the exporter does not know is an
/// error naming it, never a silent gap.

#include <onnx/onnx_pb.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/checkpoint/keras_config.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/version.hpp"

namespace dtrain::checkpoint {

namespace detail {
static_assert(std::endian::native == std::endian::little, "export_onnx writes tensors' raw bytes little-endian");

/// An ONNX graph being written: initializers, nodes, fresh names.
class onnx_graph {
 public:
  explicit onnx_graph(onnx::GraphProto& g) : g_(g) {}

  std::string fresh(const std::string& stem) { return stem + "/" + std::to_string(serial_++); }
  /// A float initializer of `shape` holding `values`.
  std::string constant(const std::string& stem, const std::vector<std::int64_t>& shape, std::span<const float> values) {
    const std::string name = fresh(stem);
    onnx::TensorProto* t = g_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : shape) t->add_dims(d);
    t->set_raw_data(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    return name;
  }
  /// An int64 initializer (shapes, pads).
  std::string ints(const std::string& stem, const std::vector<std::int64_t>& values) {
    const std::string name = fresh(stem);
    onnx::TensorProto* t = g_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(std::int64_t(values.size()));
    t->set_raw_data(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(std::int64_t));
    return name;
  }
  /// Node `op` on `inputs`; returns its output, named `out` or a fresh name.
  onnx::NodeProto& add(const std::string& op, const std::vector<std::string>& inputs, const std::string& out) {
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(out);
    return *n;
  }
  std::string op(const std::string& op, const std::vector<std::string>& inputs, const std::string& stem) {
    const std::string out = fresh(stem);
    add(op, inputs, out);
    return out;
  }

 private:
  onnx::GraphProto& g_;
  int serial_ = 0;
};

inline void attr(onnx::NodeProto& n, const char* name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name), a->set_type(onnx::AttributeProto::INT), a->set_i(v);
}
inline void attr(onnx::NodeProto& n, const char* name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name), a->set_type(onnx::AttributeProto::FLOAT), a->set_f(v);
}
inline void attr(onnx::NodeProto& n, const char* name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name), a->set_type(onnx::AttributeProto::STRING), a->set_s(v);
}
inline void attr(onnx::NodeProto& n, const char* name, const std::vector<std::int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name), a->set_type(onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}

/// One layer's inputs, config, shapes and weights, as the exporter sees it.
struct onnx_layer {
  std::string name, class_name;
  const json* config;
  std::vector<std::string> inputs;                     // tensor names
  std::vector<std::vector<std::size_t>> input_shapes;  // per sample
  std::vector<std::size_t> output_shape;
  std::vector<std::span<const float>> vars;
  std::vector<std::vector<std::size_t>> var_shapes;

  std::vector<std::int64_t> pair(const char* key) const { return config->at(key).get<std::vector<std::int64_t>>(); }
  float f(const char* key) const { return config->at(key).get<float>(); }
  std::string s(const char* key) const { return config->at(key).get<std::string>(); }
};

/// `x` through Keras activation `name`.
inline std::string onnx_activation(onnx_graph& g, const std::string& name, const std::string& x, const std::string& stem,
                                   const std::string& layer) {
  if (name == "linear") return x;
  if (name == "relu") return g.op("Relu", {x}, stem);
  if (name == "sigmoid") return g.op("Sigmoid", {x}, stem);
  if (name == "tanh") return g.op("Tanh", {x}, stem);
  if (name == "softmax") {
    const std::string out = g.fresh(stem);
    attr(g.add("Softmax", {x}, out), "axis", std::int64_t(-1));
    return out;
  }
  if (name == "gelu") {  // exact: x * (1 + erf(x / sqrt 2)) / 2
    const float inv_sqrt2 = 0.70710678118654752f, half = 0.5f, one = 1.0f;
    const std::string e = g.op("Erf", {g.op("Mul", {x, g.constant(stem, {}, {&inv_sqrt2, 1})}, stem)}, stem);
    const std::string p = g.op("Add", {e, g.constant(stem, {}, {&one, 1})}, stem);
    return g.op("Mul", {g.op("Mul", {x, p}, stem), g.constant(stem, {}, {&half, 1})}, stem);
  }
  throw value_error("export_onnx: layer '" + layer + "' has activation '" + name + "', which the exporter does not know");
}

/// TF's padding of one axis: (before, after).
inline std::pair<std::int64_t, std::int64_t> tf_pads(std::int64_t in, std::int64_t taps, std::int64_t stride,
                                                     std::int64_t dilation, bool same) {
  if (!same) return {0, 0};
  const std::int64_t span = (taps - 1) * dilation + 1, out = (in + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * stride + span - in);
  return {total / 2, total - total / 2};
}

/// Keras' (kh, kw, a, b) kernel as ONNX's (b, a, kh, kw) (a conv's (out, in, kh, kw)).
inline std::vector<float> kernel_to_oihw(std::span<const float> k, const std::vector<std::size_t>& s) {
  const std::size_t kh = s[0], kw = s[1], a = s[2], b = s[3];
  std::vector<float> out(k.size());
  for (std::size_t y = 0; y < kh; ++y)
    for (std::size_t x = 0; x < kw; ++x)
      for (std::size_t i = 0; i < a; ++i)
        for (std::size_t o = 0; o < b; ++o) out[((o * a + i) * kh + y) * kw + x] = k[((y * kw + x) * a + i) * b + o];
  return out;
}

/// Keras' depthwise kernel (kh, kw, c, m) as ONNX's grouped one (c * m, 1, kh, kw): output channel c * m + j
/// is input channel c's j-th filter, as Keras orders a depthwise convolution's outputs.
inline std::vector<float> depthwise_to_grouped(std::span<const float> k, const std::vector<std::size_t>& s) {
  const std::vector<float> w = kernel_to_oihw(k, s);  // (m, c, kh, kw)
  const std::size_t cs = s[2], ms = s[3], taps = s[0] * s[1];
  std::vector<float> d(w.size());
  for (std::size_t j = 0; j < ms; ++j)
    for (std::size_t ch = 0; ch < cs; ++ch)
      for (std::size_t t = 0; t < taps; ++t) d[(ch * ms + j) * taps + t] = w[(j * cs + ch) * taps + t];
  return d;
}

inline std::string to_nchw(onnx_graph& g, const std::string& x, const std::string& stem) {
  const std::string out = g.fresh(stem);
  attr(g.add("Transpose", {x}, out), "perm", std::vector<std::int64_t>{0, 3, 1, 2});
  return out;
}
inline std::string to_nhwc(onnx_graph& g, const std::string& x, const std::string& stem) {
  const std::string out = g.fresh(stem);
  attr(g.add("Transpose", {x}, out), "perm", std::vector<std::int64_t>{0, 2, 3, 1});
  return out;
}

/// A channels-first convolution of `x` (channels last) with ONNX kernel `w` (out, in / group, kh, kw).
inline std::string onnx_conv(onnx_graph& g, const onnx_layer& l, const std::string& x, const std::string& w,
                             const std::string* bias, std::vector<std::int64_t> kernel, std::vector<std::int64_t> strides,
                             std::vector<std::int64_t> dilations, bool same, std::int64_t group) {
  const auto& in = l.input_shapes[0];
  const auto [t, b] = tf_pads(std::int64_t(in[0]), kernel[0], strides[0], dilations[0], same);
  const auto [left, right] = tf_pads(std::int64_t(in[1]), kernel[1], strides[1], dilations[1], same);
  std::vector<std::string> inputs{to_nchw(g, x, l.name), w};
  if (bias) inputs.push_back(*bias);
  const std::string out = g.fresh(l.name);
  auto& n = g.add("Conv", inputs, out);
  attr(n, "kernel_shape", kernel), attr(n, "strides", strides), attr(n, "dilations", dilations);
  attr(n, "pads", std::vector<std::int64_t>{t, left, b, right}), attr(n, "group", group);
  return to_nhwc(g, out, l.name);
}

/// The nodes of one layer; returns the name of its output.
inline std::string onnx_layer_nodes(onnx_graph& g, const onnx_layer& l) {
  const std::string& c = l.class_name;
  const std::string& x = l.inputs[0];
  auto constant = [&](std::size_t v, std::vector<std::int64_t> shape = {}) {
    if (shape.empty()) shape.assign(l.var_shapes[v].begin(), l.var_shapes[v].end());
    return g.constant(l.name, shape, l.vars[v]);
  };
  auto activation = [&](const std::string& y) { return onnx_activation(g, l.s("activation"), y, l.name, l.name); };
  auto has_bias = [&] { return l.config->value("use_bias", true); };
  const bool same = l.config->contains("padding") && (*l.config)["padding"].is_string() && l.s("padding") == "same";

  if (c == "Dense") {
    std::string y = g.op("MatMul", {x, constant(0)}, l.name);
    if (has_bias()) y = g.op("Add", {y, constant(1)}, l.name);
    return activation(y);
  }
  if (c == "Conv2D" || c == "DepthwiseConv2D") {
    const bool depthwise = c == "DepthwiseConv2D";
    const auto& ks = l.var_shapes[0];  // (kh, kw, in / groups, filters) or (kh, kw, channels, multiplier)
    const std::vector<float> w = depthwise ? depthwise_to_grouped(l.vars[0], ks) : kernel_to_oihw(l.vars[0], ks);
    const auto out_ch = std::int64_t(depthwise ? ks[2] * ks[3] : ks[3]);
    const std::int64_t per_group = depthwise ? 1 : std::int64_t(ks[2]);
    const std::string wn = g.constant(l.name, {out_ch, per_group, std::int64_t(ks[0]), std::int64_t(ks[1])}, w);
    const std::string bn = has_bias() ? constant(1) : std::string();
    const std::int64_t groups = depthwise ? std::int64_t(ks[2]) : l.config->value("groups", std::int64_t(1));
    return activation(onnx_conv(g, l, x, wn, has_bias() ? &bn : nullptr, {std::int64_t(ks[0]), std::int64_t(ks[1])},
                                l.pair("strides"), l.pair("dilation_rate"), same, groups));
  }
  if (c == "SeparableConv2D") {
    const auto& ds = l.var_shapes[0];  // (kh, kw, c, m)
    const std::size_t cs = ds[2], ms = ds[3];
    const std::string dn = g.constant(l.name, {std::int64_t(cs * ms), 1, std::int64_t(ds[0]), std::int64_t(ds[1])},
                                      depthwise_to_grouped(l.vars[0], ds));
    const std::string mid = onnx_conv(g, l, x, dn, nullptr, {std::int64_t(ds[0]), std::int64_t(ds[1])}, l.pair("strides"),
                                      l.pair("dilation_rate"), same, std::int64_t(cs));
    const auto& ps = l.var_shapes[1];  // (1, 1, c * m, filters)
    const std::string pn = g.constant(l.name, {std::int64_t(ps[3]), std::int64_t(ps[2]), 1, 1}, kernel_to_oihw(l.vars[1], ps));
    const std::string bn = has_bias() ? constant(2) : std::string();
    onnx_layer point = l;  // a 1 x 1 convolution on the depthwise output
    point.input_shapes = {l.output_shape};
    return activation(onnx_conv(g, point, mid, pn, has_bias() ? &bn : nullptr, {1, 1}, {1, 1}, {1, 1}, false, 1));
  }
  if (c == "Conv2DTranspose") {
    const auto& ks = l.var_shapes[0];  // (kh, kw, filters, in)
    const auto st = l.pair("strides"), dil = l.pair("dilation_rate");
    std::vector<std::int64_t> pads(4, 0), extra(2, 0);
    for (int a = 0; a < 2; ++a) {
      const std::int64_t in = std::int64_t(l.input_shapes[0][a]), s = st[a], span = (std::int64_t(ks[a]) - 1) * dil[a] + 1;
      std::int64_t before = 0, after = 0, op = 0;
      if (!(*l.config)["output_padding"].is_null()) {
        op = l.pair("output_padding")[a];
        if (same) before = after = span / 2;
      } else if (same) {
        const std::int64_t total = span - s;
        if (total >= 0) before = total / 2, after = total - total / 2;
        else op = s - span;
      } else {
        op = std::max<std::int64_t>(s - span, 0);
      }
      if ((in - 1) * s + span + op - before - after != std::int64_t(l.output_shape[a]))
        throw value_error("export_onnx: layer '" + l.name + "': the transposed convolution's output length cannot be "
                          "expressed with ONNX's pads");
      pads[a] = before, pads[a + 2] = after, extra[a] = op;
    }
    // Keras (kh, kw, out, in) -> ONNX (in, out, kh, kw)
    std::vector<float> w(l.vars[0].size());
    const std::size_t kh = ks[0], kw = ks[1], o = ks[2], i = ks[3];
    for (std::size_t y = 0; y < kh; ++y)
      for (std::size_t xx = 0; xx < kw; ++xx)
        for (std::size_t a = 0; a < o; ++a)
          for (std::size_t b = 0; b < i; ++b) w[((b * o + a) * kh + y) * kw + xx] = l.vars[0][((y * kw + xx) * o + a) * i + b];
    std::vector<std::string> inputs{to_nchw(g, x, l.name),
                                    g.constant(l.name, {std::int64_t(i), std::int64_t(o), std::int64_t(kh), std::int64_t(kw)}, w)};
    if (has_bias()) inputs.push_back(constant(1));
    const std::string out = g.fresh(l.name);
    auto& n = g.add("ConvTranspose", inputs, out);
    attr(n, "kernel_shape", std::vector<std::int64_t>{std::int64_t(kh), std::int64_t(kw)}), attr(n, "strides", st);
    attr(n, "dilations", dil), attr(n, "pads", pads), attr(n, "output_padding", extra);
    return activation(to_nhwc(g, out, l.name));
  }
  if (c == "MaxPooling2D" || c == "AveragePooling2D") {
    const auto k = l.pair("pool_size"), st = l.pair("strides");
    const auto& in = l.input_shapes[0];
    const auto [t, b] = tf_pads(std::int64_t(in[0]), k[0], st[0], 1, same);
    const auto [left, right] = tf_pads(std::int64_t(in[1]), k[1], st[1], 1, same);
    const std::string out = g.fresh(l.name);
    auto& n = g.add(c == "MaxPooling2D" ? "MaxPool" : "AveragePool", {to_nchw(g, x, l.name)}, out);
    attr(n, "kernel_shape", k), attr(n, "strides", st), attr(n, "pads", std::vector<std::int64_t>{t, left, b, right});
    return to_nhwc(g, out, l.name);  // (AveragePool leaves the padding out of the count, as TF does)
  }
  if (c == "GlobalMaxPooling2D" || c == "GlobalAveragePooling2D") {
    const std::string out = g.fresh(l.name);
    auto& n = g.add(c == "GlobalMaxPooling2D" ? "ReduceMax" : "ReduceMean", {x}, out);
    attr(n, "axes", std::vector<std::int64_t>{1, 2}), attr(n, "keepdims", std::int64_t(l.config->value("keepdims", false)));
    return out;
  }
  if (c == "BatchNormalization") {  // inference: x * gamma / sqrt(var + eps) + (beta - mean * that)
    const float eps = l.f("epsilon");
    const std::size_t n = l.vars[0].size();
    std::vector<float> scale(n), shift(n);
    for (std::size_t k = 0; k < n; ++k) {
      scale[k] = l.vars[0][k] / std::sqrt(l.vars[3][k] + eps);
      shift[k] = l.vars[1][k] - l.vars[2][k] * scale[k];
    }
    const std::string y = g.op("Mul", {x, g.constant(l.name, {std::int64_t(n)}, scale)}, l.name);
    return g.op("Add", {y, g.constant(l.name, {std::int64_t(n)}, shift)}, l.name);
  }
  if (c == "LayerNormalization") {
    const std::string out = g.fresh(l.name);
    auto& n = g.add("LayerNormalization", {x, constant(0), constant(1)}, out);
    attr(n, "axis", std::int64_t(-1)), attr(n, "epsilon", l.f("epsilon"));
    return out;
  }
  if (c == "Activation") return activation(x);
  if (c == "ReLU") return g.op("Relu", {x}, l.name);
  if (c == "Softmax") return onnx_activation(g, "softmax", x, l.name, l.name);
  if (c == "LeakyReLU") {
    const std::string out = g.fresh(l.name);
    attr(g.add("LeakyRelu", {x}, out), "alpha", l.f("negative_slope"));
    return out;
  }
  if (c == "Dropout" || c == "SpatialDropout2D") return x;  // inference
  if (c == "Flatten" || c == "Reshape") {
    std::vector<std::int64_t> shape{-1};
    shape.insert(shape.end(), l.output_shape.begin(), l.output_shape.end());
    return g.op("Reshape", {x, g.ints(l.name, shape)}, l.name);
  }
  if (c == "ZeroPadding2D") {
    const auto p = (*l.config)["padding"].get<std::vector<std::vector<std::int64_t>>>();
    return g.op("Pad", {x, g.ints(l.name, {0, p[0][0], p[1][0], 0, 0, p[0][1], p[1][1], 0})}, l.name);
  }
  if (c == "UpSampling2D") {  // nearest: each value repeated
    const auto s = l.pair("size");
    const std::vector<float> scales{1.0f, float(s[0]), float(s[1]), 1.0f};
    const std::string out = g.fresh(l.name);
    auto& n = g.add("Resize", {x, "", g.constant(l.name, {4}, scales)}, out);
    attr(n, "mode", std::string("nearest")), attr(n, "coordinate_transformation_mode", std::string("asymmetric"));
    attr(n, "nearest_mode", std::string("floor"));
    return out;
  }
  if (c == "Embedding") {
    if (l.config->value("mask_zero", false))
      throw value_error("export_onnx: layer '" + l.name + "' is an embedding with mask_zero, whose mask over the "
                        "padded steps the exported graph would not apply");
    const std::string idx = g.fresh(l.name);
    attr(g.add("Cast", {x}, idx), "to", std::int64_t(onnx::TensorProto::INT64));
    return g.op("Gather", {constant(0), idx}, l.name);
  }
  if (c == "Add" || c == "Multiply") {
    std::string y = x;
    for (std::size_t k = 1; k < l.inputs.size(); ++k) y = g.op(c == "Add" ? "Add" : "Mul", {y, l.inputs[k]}, l.name);
    return y;
  }
  if (c == "Concatenate") {
    const std::string out = g.fresh(l.name);
    attr(g.add("Concat", l.inputs, out), "axis", std::int64_t(-1));
    return out;
  }
  throw value_error("export_onnx: layer '" + l.name + "' is a " + c + ", which the ONNX exporter does not know");
}

inline void onnx_value(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::size_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("batch");
  for (auto d : dims) s->add_dim()->set_dim_value(std::int64_t(d));
}
}  // namespace detail

/// The model as an ONNX `ModelProto` (opset 17), for inference.
template <class Model>
onnx::ModelProto onnx_model(const Model& m) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("dtrain");
  model.set_producer_version(version);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name(Model::graph_type::name);
  detail::onnx_graph g(graph);

  const detail::json config = keras_config(m);
  const auto shapes = detail::source_shapes<Model>();
  const auto infos = m.layers();
  const std::vector<float> weights = m.get_weights();
  std::vector<std::string> tensor(Model::num_inputs + Model::depth);  // each source's tensor name
  for (std::size_t k = 0; k < Model::num_inputs; ++k) {
    tensor[k] = m.source_name(k);
    detail::onnx_value(graph.add_input(), tensor[k], shapes[k]);
  }
  std::vector<const detail::json*> entries;
  for (const auto& e : config["config"]["layers"])
    if (e["class_name"] != "InputLayer") entries.push_back(&e);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          detail::onnx_layer l{infos[I].name, (*entries[I])["class_name"], &(*entries[I])["config"], {}, {}, shapes[Model::num_inputs + I], {}, {}};
          for (std::size_t s : Model::graph_type::template sources<I>) {
            l.inputs.push_back(tensor[s]);
            l.input_shapes.push_back(shapes[s]);
          }
          for (const auto& v : infos[I].variables) {
            l.vars.push_back(std::span<const float>(weights).subspan(v.offset, v.size));
            l.var_shapes.push_back(v.shape);
          }
          tensor[Model::num_inputs + I] = detail::onnx_layer_nodes(g, l);
        }(),
        ...);
  }(std::make_index_sequence<Model::depth>{});
  for (std::size_t o = 0; o < Model::num_outputs; ++o) {  // outputs named after their layers
    const std::size_t s = Model::num_inputs + Model::graph_type::output_nodes[o];
    const std::string name = m.output_name(o);
    g.add("Identity", {tensor[s]}, name);
    detail::onnx_value(graph.add_output(), name, shapes[s]);
  }
  return model;
}

/// Keras' `model.export(path, format="onnx")`: the model as an ONNX file, written atomically.
template <class Model>
void export_onnx(const Model& m, const std::filesystem::path& path) {
  std::string bytes;
  if (!onnx_model(m).SerializeToString(&bytes)) throw io_error("export_onnx: " + path.string() + ": cannot serialise the model");
  dtrain::detail::write_file_atomic(path, bytes);
}

}  // namespace dtrain::checkpoint
