// A model input no node takes (a dangling input): this must not compile.
// expect: functional: an input of the model is taken by no node
#include "model.hpp"
using namespace dtrain;
struct image;
struct meta;
using bad = functional<inputs<node<image, input<4>>, node<meta, input<2>>>, dense<4>, dense<2>>;
int main() { bad model; }
