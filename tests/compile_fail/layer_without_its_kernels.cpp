// A backend may bring up its kernels family by family: a dense model trains on one without the window
// kernels (checked below), and a conv2d layer on it must not compile, naming the family it lacks.
// expect: conv2d: the backend lacks the window kernels
#include "model.hpp"
struct no_windows : dtrain::cpu {
  static constexpr const char* name = "no_windows";
  template <dtrain::window_geometry, dtrain::activation_kind, class... Args>
  void conv2d_forward(Args&&...) const = delete;
};
static_assert(dtrain::model_backend<no_windows> && !dtrain::window_kernels<no_windows> && !dtrain::backend<no_windows>);
using dense_net = dtrain::basic_sequential<no_windows, dtrain::input<4>, dtrain::dense<3, dtrain::relu>, dtrain::dense<2>>;
using conv_net = dtrain::basic_sequential<no_windows, dtrain::input<8, 8, 1>, dtrain::conv2d<4, 3>, dtrain::flatten,
                                          dtrain::dense<2>>;
int main() {
  dense_net fine;
  conv_net bad;
}
