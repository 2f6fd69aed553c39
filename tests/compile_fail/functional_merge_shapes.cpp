// Adding outputs of different shapes: this must not compile.
// expect: add: every input must have the same shape
#include "model.hpp"
using namespace dtrain;
struct a;
struct b;
using bad = functional<input<4>, node<a, dense<4>>, node<b, dense<5>, model_input>, node<void, add, a, b>, dense<2>>;
int main() { bad model; }
