// A conv2d after a dense layer has no (height, width, channels) input: this must not compile.
// expect: conv2d expects a rank-3 input \(height, width, channels\)
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<784>, dtrain::dense<64>, dtrain::conv2d<8, 3>>;
int main() { bad model; }
