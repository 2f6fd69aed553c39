// The GPU suite's main: without a CUDA device it says so and exits 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE dtrain_gpu
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <cstdio>

#include <dtrain/backend/cuda.hpp>

int main(int argc, char* argv[]) {
  if (dtrain::cuda_device_count() == 0) {
    std::puts("no CUDA device: the GPU suite is skipped");
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
