// outputs<...> naming a node the model does not have: this must not compile.
// expect: outputs: a name no node of the model has
#include "model.hpp"
using namespace dtrain;
struct a;
struct elsewhere;
using bad = functional<input<4>, node<a, dense<4>>, dense<2>, outputs<a, elsewhere>>;
int main() { bad model; }
