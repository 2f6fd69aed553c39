// Masks over padded steps (Keras' Embedding(mask_zero=True)): a model reads a padded batch as if the
// padding were absent. Each case builds a model twice, for sequences of 6 steps and of 4, with the same
// weights (no variable's shape depends on the steps), and feeds the 6-step one the 4-step batch with two
// steps of padding (index 0): its predictions, and the weights after a training step, are the short
// model's. A layer that does not support masking ends the mask, and so does a merge of a masked and an
// unmasked input, as in Keras.
#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;

namespace {
struct emb;
struct att;
struct res;

template <std::size_t T>
using lstm_model = sequential<input<T>, embedding<9, 4, mask_zero<true>>, lstm<3>, dense<2>>;
template <std::size_t T>
using distributed = sequential<input<T>, embedding<9, 4, mask_zero<true>>, time_distributed<dense<3, dtrain::tanh>>,
                               lstm<2>, dense<2>>;
template <std::size_t T>
using gru_sequences = sequential<input<T>, embedding<9, 4, mask_zero<true>>, gru<3, return_sequences<true>>,
                                 global_average_pooling1d<>, dense<2>>;
// x = Embedding(9, 6, mask_zero=True)(inputs); y = LayerNormalization()(x + MultiHeadAttention(2, 3)(x, x));
// outputs = Dense(2)(GlobalAveragePooling1D()(Dense(5, "gelu")(y))): the mask passes attention, the
// residual add, the normalization and a dense layer to the pooling
template <std::size_t T, bool Causal>
using attention_model =
    functional<input<T>, node<emb, embedding<9, 6, mask_zero<true>>>,
               node<att, multi_head_attention<2, 3, use_causal_mask<Causal>>>, node<res, add, emb, att>,
               layer_normalization<>, dense<5, gelu>, global_average_pooling1d<>, dense<2>>;

/// Rows of 4 indices in 1..8, and the same rows padded to 6 steps with 0 at the end or at the start.
struct batches {
  tensor short_rows = xt::zeros<float>({3, 4});
  tensor padded = xt::zeros<float>({3, 6});
  explicit batches(bool at_start) {
    const float ids[3][4] = {{3, 1, 4, 1}, {5, 8, 2, 6}, {5, 3, 5, 8}};
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t t = 0; t < 4; ++t) short_rows(i, t) = padded(i, t + (at_start ? 2 : 0)) = ids[i][t];
  }
};

/// The long model with the short one's weights predicts the same on the padded batch, and one SGD step
/// on each leaves the same weights.
template <class Long, class Short>
void check_padding_is_absent(bool at_start) {
  const batches b(at_start);
  Short s;
  Long l;
  l.set_weights(s.get_weights());
  const tensor ps = s.predict(b.short_rows), pl = l.predict(b.padded);
  BOOST_TEST(pl.shape() == ps.shape(), tt::per_element());
  for (std::size_t i = 0; i < ps.size(); ++i) BOOST_TEST(pl.data()[i] == ps.data()[i], tt::tolerance(1e-5f));
  tensor y = xt::zeros<float>({3});
  y(1) = 1.0f;
  s.compile({.optimizer = sgd{{.learning_rate = 0.5f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  l.compile({.optimizer = sgd{{.learning_rate = 0.5f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  const float loss_s = s.train_step(b.short_rows, y).at("loss"), loss_l = l.train_step(b.padded, y).at("loss");
  BOOST_TEST(loss_l == loss_s, tt::tolerance(1e-5f));
  const std::vector<float> ws = s.get_weights(), wl = l.get_weights(), w0 = Short{}.get_weights();
  std::size_t moved = 0;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    BOOST_TEST(wl[i] == ws[i], tt::tolerance(1e-5f));
    moved += ws[i] != w0[i];
  }
  BOOST_TEST(moved > ws.size() / 2);  // the step trained the layers behind the mask too
}
}  // namespace

BOOST_AUTO_TEST_SUITE(masking)

BOOST_AUTO_TEST_CASE(lstm_skips_padded_steps_at_the_end_and_the_start) {
  check_padding_is_absent<lstm_model<6>, lstm_model<4>>(false);
  check_padding_is_absent<lstm_model<6>, lstm_model<4>>(true);
  check_padding_is_absent<distributed<6>, distributed<4>>(false);  // the mask passes time_distributed
}

BOOST_AUTO_TEST_CASE(gru_sequences_and_the_pooling_skip_padded_steps) {
  check_padding_is_absent<gru_sequences<6>, gru_sequences<4>>(false);
  check_padding_is_absent<gru_sequences<6>, gru_sequences<4>>(true);
}

BOOST_AUTO_TEST_CASE(attention_add_normalization_and_dense_carry_the_mask) {
  check_padding_is_absent<attention_model<6, false>, attention_model<4, false>>(false);
  check_padding_is_absent<attention_model<6, false>, attention_model<4, false>>(true);
  check_padding_is_absent<attention_model<6, true>, attention_model<4, true>>(false);
}

// conv1d does not support masking (nor does Keras' Conv1D): the pooling after it averages every step, as
// in the same model without mask_zero
BOOST_AUTO_TEST_CASE(a_layer_without_masking_ends_the_mask) {
  using masked = sequential<input<6>, embedding<9, 4, mask_zero<true>>, conv1d<3, 2>, global_average_pooling1d<>>;
  using plain = sequential<input<6>, embedding<9, 4>, conv1d<3, 2>, global_average_pooling1d<>>;
  const batches b(false);
  masked m;
  plain p;
  p.set_weights(m.get_weights());
  const tensor pm = m.predict(b.padded), pp = p.predict(b.padded);
  BOOST_TEST(std::vector<float>(pm.begin(), pm.end()) == std::vector<float>(pp.begin(), pp.end()), tt::per_element());
  // nor does a merge of a masked and an unmasked input have a mask (Keras': a merge's mask is its inputs'
  // when each has one): position_embedding's output has none
  using positioned = functional<input<6>, node<emb, embedding<9, 4, mask_zero<true>>>, node<att, position_embedding<6>>,
                                node<void, add, emb, att>, global_average_pooling1d<>>;
  using positioned_plain = functional<input<6>, node<emb, embedding<9, 4>>, node<att, position_embedding<6>>,
                                      node<void, add, emb, att>, global_average_pooling1d<>>;
  positioned pm2;
  positioned_plain pp2;
  pp2.set_weights(pm2.get_weights());
  const tensor x2 = pm2.predict(b.padded), y2 = pp2.predict(b.padded);
  BOOST_TEST(std::vector<float>(x2.begin(), x2.end()) == std::vector<float>(y2.begin(), y2.end()), tt::per_element());
  // while with the mask reaching the pooling, the padded steps are left out of the mean
  using pooled = sequential<input<6>, embedding<9, 4, mask_zero<true>>, global_average_pooling1d<>>;
  using pooled_plain = sequential<input<6>, embedding<9, 4>, global_average_pooling1d<>>;
  pooled q;
  pooled_plain qp;
  qp.set_weights(q.get_weights());
  const tensor a = q.predict(b.padded), c = qp.predict(b.padded);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      float mean = 0.0f;
      const std::vector<float> w = q.get_weights();
      for (std::size_t t = 0; t < 4; ++t) mean += w[std::size_t(b.short_rows(i, t)) * 4 + j] / 4.0f;
      BOOST_TEST(a(i, j) == mean, tt::tolerance(1e-6f));
      BOOST_TEST(c(i, j) == mean * 4.0f / 6.0f + w[j] * 2.0f / 6.0f, tt::tolerance(1e-5f));  // row 0: index 0's
    }
}

// A model whose output carries the mask (a tag per step): its loss is the mean over the unmasked steps
// and its metrics count those only (Keras applies y_pred's mask to both), with and without sample weights:
// the padded steps, labelled with a class that would count, leave the logs and the training step as the
// short model's.
template <std::size_t T>
using tagger = sequential<input<T>, embedding<9, 4, mask_zero<true>>, gru<3, return_sequences<true>>, dense<5>>;

BOOST_AUTO_TEST_CASE(the_loss_and_metrics_of_a_masked_output_leave_the_padding_out) {
  const batches b(false);
  tensor ys = xt::zeros<float>({3, 4}), yl = xt::zeros<float>({3, 6});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t t = 0; t < 6; ++t) {
      yl(i, t) = t < 4 ? float((i + t) % 5) : 4.0f;
      if (t < 4) ys(i, t) = yl(i, t);
    }
  tensor sw = xt::zeros<float>({3});
  sw(0) = 1.0f, sw(1) = 0.5f, sw(2) = 2.0f;
  for (bool weighted : {false, true}) {
    tagger<4> s;
    tagger<6> l;
    l.set_weights(s.get_weights());
    const compile_options options{.optimizer = sgd{{.learning_rate = 0.5f}},
                                  .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                                  .metrics = {sparse_categorical_accuracy{}},
                                  .weighted_metrics = {sparse_categorical_accuracy{}}};
    s.compile(options);
    l.compile(options);
    const logs es = weighted ? s.test_step(b.short_rows, ys, sw) : s.test_step(b.short_rows, ys);
    const logs el = weighted ? l.test_step(b.padded, yl, sw) : l.test_step(b.padded, yl);
    for (const char* k : {"loss", "sparse_categorical_accuracy", "weighted_sparse_categorical_accuracy"})
      BOOST_TEST(el.at(k) == es.at(k), k << (weighted ? " weighted" : "") << tt::tolerance(1e-5f));
    const float ts = weighted ? s.train_step(b.short_rows, ys, sw).at("loss") : s.train_step(b.short_rows, ys).at("loss");
    const float tl = weighted ? l.train_step(b.padded, yl, sw).at("loss") : l.train_step(b.padded, yl).at("loss");
    BOOST_TEST(tl == ts, tt::tolerance(1e-5f));
    const std::vector<float> ws = s.get_weights(), wl = l.get_weights();
    for (std::size_t i = 0; i < ws.size(); ++i) BOOST_TEST(wl[i] == ws[i], tt::tolerance(1e-5f));
  }
}

BOOST_AUTO_TEST_SUITE_END()
