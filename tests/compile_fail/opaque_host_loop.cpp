// A layer whose forward is a host loop over its output (y[i] = ...): fine on the cpu backend, refused on
// the opaque backend, which stands for any backend whose memory the host cannot index.
// expect: backend memory was indexed
#include "host_layer.hpp"

struct square_in_a_loop {
  template <class C, class P>
  static void run(C x, P y, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) y[i] = x[i] * x[i];
  }
};

int main() { run_on_cpu_and_opaque<square_in_a_loop>(); }
