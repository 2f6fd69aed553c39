// Reshaping 784 values into 27 x 27 loses values: this must not compile.
// expect: reshape: the target shape must hold exactly as many values
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<784>, dtrain::reshape<27, 27, 1>, dtrain::flatten, dtrain::dense<10>>;
int main() { bad model; }
