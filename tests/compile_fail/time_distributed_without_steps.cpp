// time_distributed applies its layer to each step of a sequence: an input of one axis has no steps.
// expect: time_distributed expects a sequence: an input of rank 2 or more
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<8>, dtrain::time_distributed<dtrain::dense<4>>, dtrain::dense<2>>;
int main() { bad model; }
