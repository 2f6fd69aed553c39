#pragma once
// A layer whose forward is host code written by the test (`Forward::run(x, y, count)` on the backend's
// pointers): the compile-fail tests build it into a model on the cpu backend, where memory is host memory
// and it compiles, and on the opaque backend, where it must not.
#include <cstddef>

#include <dtrain/backend/opaque.hpp>
#include <dtrain/model/sequential.hpp>

template <class Forward>
struct host_layer {
  template <class In, class B>
  struct bind : dtrain::detail::no_params {
    using input_shape = In;
    using output_shape = In;
    using ptr = dtrain::pointer_t<B, float>;
    using cptr = dtrain::pointer_t<B, const float>;
    static constexpr const char* keras_name = "host_layer";
    static constexpr const char* class_name = "HostLayer";
    void forward(dtrain::layer_context<B>&, cptr x, ptr y, std::size_t n, cptr) { Forward::run(x, y, n * In::size); }
    void backward(dtrain::layer_context<B>&, cptr, cptr, ptr, ptr, std::size_t, cptr, ptr) {}
  };
};

template <class Forward>
void run_on_cpu_and_opaque() {
  dtrain::sequential<dtrain::input<4>, host_layer<Forward>> on_cpu;  // fine: host memory
  on_cpu(dtrain::zeros({1, 4}));
  dtrain::basic_sequential<dtrain::opaque, dtrain::input<4>, host_layer<Forward>> on_opaque;
  on_opaque(dtrain::zeros({1, 4}));
}
