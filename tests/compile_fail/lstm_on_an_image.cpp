// A recurrent layer runs over (steps, features); an image (h, w, c) must not compile (time_distributed
// applies a layer to each step instead).
// expect: recurrent layer: expects a rank-2 input \(steps, features\)
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<8, 8, 3>, dtrain::lstm<16>, dtrain::dense<10>>;
int main() { bad model; }
