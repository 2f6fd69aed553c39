// Keras' padding="causal" is Conv1D's alone: a conv2d with it must not compile.
// expect: padding::causal is conv1d's only
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<8, 8, 1>, dtrain::conv2d<4, 3, dtrain::relu, dtrain::padding::causal>,
                               dtrain::flatten, dtrain::dense<10>>;
int main() { bad model; }
