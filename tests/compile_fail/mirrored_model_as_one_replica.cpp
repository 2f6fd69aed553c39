// A model mirrored_strategy made holds every replica; code written for one model (taking its type by
// reference) would train replica 0 alone and let the others drift: this must not compile.
// expect: inaccessible base
#include <dtrain/distribute/mirrored_strategy.hpp>

#include "model.hpp"
using net = dtrain::sequential<dtrain::input<4>, dtrain::dense<2>>;
void train_alone(net& m, const dtrain::tensor& x, const dtrain::tensor& y) { m.train_step(x, y); }
int main() {
  dtrain::mirrored_strategy<> strategy({"/cpu:0", "/cpu:1"});
  auto model = strategy.make_model<net>();
  train_alone(model, dtrain::zeros({2, 4}), dtrain::zeros({2}));
}
