// The key and the value of cross-attention are one sequence seen two ways: their steps must agree.
// expect: multi_head_attention: the key and the value must have the same steps
#include "model.hpp"
struct q;
struct v;
struct k;
using bad = dtrain::functional<dtrain::inputs<dtrain::node<q, dtrain::input<3, 4>>, dtrain::node<v, dtrain::input<5, 4>>,
                                              dtrain::node<k, dtrain::input<6, 4>>>,
                               dtrain::node<void, dtrain::multi_head_attention<2, 2>, q, v, k>, dtrain::flatten,
                               dtrain::dense<2>>;
int main() { bad model; }
