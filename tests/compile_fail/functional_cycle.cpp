// A functional model whose nodes take each other's outputs (a cycle): this must not compile.
// expect: functional: a node takes the output of a node defined after it \(a cycle
#include "model.hpp"
using namespace dtrain;
struct a;
struct b;
using bad = functional<input<4>, node<a, dense<4>, b>, node<b, dense<4>, a>, dense<2>>;
int main() { bad model; }
