// A node taking an output no node is named for (a dangling reference): this must not compile.
// expect: functional: a node takes an input that no node of the model is named
#include "model.hpp"
using namespace dtrain;
struct a;
struct elsewhere;
using bad = functional<input<4>, node<a, dense<4>>, node<void, add, a, elsewhere>, dense<2>>;
int main() { bad model; }
