// Under padding::same, a kernel of even span with output_padding 0 gives an output that a convolution
// does not map back onto the input (TF rejects it at run time): this must not compile.
// expect: conv2d_transpose: with this output_padding
#include "model.hpp"
using bad = dtrain::sequential<dtrain::input<4, 4, 3>,
                               dtrain::conv2d_transpose<2, 2, dtrain::linear, dtrain::strides<2>, dtrain::padding::same,
                                                        dtrain::output_padding<0>>>;
int main() { bad model; }
