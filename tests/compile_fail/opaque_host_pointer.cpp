// A layer that copies its input with memcpy, as if backend memory were host memory. It compiles and
// runs on the cpu backend but must not compile on the opaque backend: on a GPU it would hand device
// addresses to host code.
// expect: backend memory was used as a host pointer
#include <cstring>

#include "host_layer.hpp"

struct copy_with_memcpy {
  template <class C, class P>
  static void run(C x, P y, std::size_t count) {
    std::memcpy(y, x, count * sizeof(float));
  }
};

int main() { run_on_cpu_and_opaque<copy_with_memcpy>(); }
