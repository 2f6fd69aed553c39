// A merge of inputs masked by two embeddings (Keras ORs the masks) must not compile: one mask per merge.
// expect: the inputs of a merge layer carry one mask
#include "model.hpp"
using namespace dtrain;
struct left_ids;
struct right_ids;
struct l;
struct r;
using bad = functional<inputs<node<left_ids, input<6>>, node<right_ids, input<6>>>,
                       node<l, embedding<9, 4, mask_zero<true>>, left_ids>, node<r, embedding<9, 4, mask_zero<true>>, right_ids>,
                       node<void, add, l, r>, global_average_pooling1d<>>;
int main() { bad model; }
