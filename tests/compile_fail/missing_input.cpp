// A sequential must start with input<...>: this must not compile.
// expect: the first template argument must be dtrain::input
#include "model.hpp"
using bad = dtrain::sequential<dtrain::dense<64>, dtrain::dense<10>>;
int main() { bad model; }
