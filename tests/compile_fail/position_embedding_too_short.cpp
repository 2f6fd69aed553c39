// A position table of 16 steps cannot embed a sequence of 32: this must not compile.
// expect: position_embedding: the input has more steps than sequence_length
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<32, 8>, dtrain::position_embedding<16>, dtrain::flatten, dtrain::dense<10>>;
int main() { bad model; }
