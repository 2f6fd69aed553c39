// Attention runs over (steps, features); an image (h, w, c) must not compile.
// expect: multi_head_attention expects a rank-2 input \(steps, features\)
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<8, 8, 3>, dtrain::multi_head_attention<2, 4>, dtrain::flatten, dtrain::dense<10>>;
int main() { bad model; }
