// An embedding with mask_zero computes its mask from the batch's indices: it takes a model input, and
// one after another layer must not compile.
// expect: a layer that makes a mask \(embedding<..., mask_zero<true>>\) takes a model input
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<6>, dtrain::dense<6>, dtrain::embedding<9, 4, dtrain::mask_zero<true>>,
                               dtrain::global_average_pooling1d<>>;
int main() { bad model; }
