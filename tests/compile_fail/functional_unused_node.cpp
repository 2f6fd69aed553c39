// A branch whose output nothing takes (a dangling node: its weights would never train): this must not compile.
// expect: functional: a node's output is taken by no later node and is not a model output
#include "model.hpp"
using namespace dtrain;
struct a;
struct unused;
using bad = functional<input<4>, node<a, dense<4>>, node<unused, dense<3>, model_input>, node<void, dense<2>, a>>;
int main() { bad model; }
