// The training state a backup or checkpoint holds: weights, optimizer slots and counters, generator and
// metric states, the training position and the dataset iterator's state, all read from one damaged
// file's bytes as backup_and_restore reads them on every worker.
#include <dtrain/dtrain.hpp>

#include <cstdio>

#include "fuzz_input.hpp"

using namespace dtrain;
using net = sequential<input<3>, dense<4, relu>, dense<2>>;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto x = tensor(xt::ones<float>({6, 3}));
  static const auto y = tensor(xt::zeros<float>({6}));
  net m;
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
  const auto before = m.get_weights();
  dtrain_fuzz::expect_only_dtrain_errors([&] {
    dtrain::detail::model_handle<net> h(m);
    training_state s;
    try {
      s = h.states().read(std::span<const char>(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    } catch (const dtrain::error& e) {
      if (m.get_weights() != before) {
        std::fprintf(stderr, "refused, but changed the weights: %s\n", e.what());
        __builtin_trap();  // a refused file changes nothing
      }
      throw;
    }
    const training_position p = s.position;
    h.apply_state(std::move(s));
    auto ds = data::from_tensor_slices(x, y) | data::batch(2);
    auto iter = data::make_iterator(ds);
    iter.restore(p.data);
    m.train_step(x, y);  // whatever was accepted can be trained on
  });
  return 0;
}
