// Bidirectional runs a recurrent layer both ways over the steps; a dense layer has no direction and must
// not compile.
// expect: bidirectional wraps a recurrent layer: lstm<...> or gru<...>
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<5, 3>, dtrain::bidirectional<dtrain::dense<4>>, dtrain::flatten, dtrain::dense<2>>;
int main() { bad model; }
