// A conv1d slides over (steps, channels); an image (h, w, c) must not compile.
// expect: conv1d expects a rank-2 input \(steps, channels\)
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<8, 8, 1>, dtrain::conv1d<4, 3>, dtrain::flatten, dtrain::dense<10>>;
int main() { bad model; }
