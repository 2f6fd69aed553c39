// The opaque test backend itself: it holds what was uploaded, refuses a kernel that would touch memory
// outside an allocation (naming the kernel and the range), and computes what the cpu backend computes.
#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::download;
using dtrain_test::upload;

BOOST_AUTO_TEST_SUITE(opaque_backend)

BOOST_AUTO_TEST_CASE(pointers_are_handles_with_offsets) {
  const opaque dev;
  auto buf = upload(dev, {1, 2, 3, 4});
  BOOST_TEST(buf.size() == 4u);
  opaque::pointer<float> null;
  BOOST_TEST(!null);
  BOOST_TEST(bool(buf.data()));
  BOOST_TEST((buf.data() + 2 == buf.data() + 2));
  BOOST_TEST((buf.data() + 1 != buf.data()));
  std::vector<float> back(2);
  dev.download(2, opaque::pointer<const float>(buf.data() + 2), back.data());
  BOOST_TEST((back == std::vector<float>{3, 4}), boost::test_tools::per_element());
  BOOST_TEST(dev.allocate<float>(0).size() == 0u);
}

BOOST_AUTO_TEST_CASE(a_kernel_outside_its_allocation_is_refused) {
  const opaque dev;
  auto a = upload(dev, {1, 2, 3}), b = dev.allocate<float>(3);
  // reads 2 values from offset 2 of 3: [2, 4)
  const std::string msg = dtrain_test::error_of([&] { dev.copy(2, opaque::pointer<const float>(a.data()) + 2, b.data()); });
  BOOST_TEST(msg.find("copy x touches elements [2, 4) of an allocation of 3") != std::string::npos, msg);
  const std::string null = dtrain_test::error_of([&] { dev.fill(1, 0.0f, opaque::pointer<float>{}); });
  BOOST_TEST(null.find("fill x reads or writes 1 elements through a null pointer") != std::string::npos, null);
  // a GEMM's operand spans (rows - 1) * ld + cols values
  auto b4 = upload(dev, {1, 2, 3, 4}), c = dev.allocate<float>(4);
  const std::string gemm = dtrain_test::error_of([&] {
    dev.gemm(transpose::no, transpose::no, 2, 2, 2, 1.0f, opaque::pointer<const float>(a.data()), 2,
             opaque::pointer<const float>(b4.data()), 2, 0.0f, c.data(), 2);
  });
  BOOST_TEST(gemm.find("gemm a touches elements [0, 4) of an allocation of 3") != std::string::npos, gemm);
}

BOOST_AUTO_TEST_CASE(a_layer_that_writes_past_its_output_is_caught) {
  // dense<3> on 2 samples writes 6 outputs: a buffer of 5 is refused before anything runs
  using L = bind_t<dense<3>, shape<4>, opaque>;
  const opaque dev;
  rng r(1);
  layer_context<opaque> ctx{dev, r, false};
  auto x = dev.allocate<float>(8), p = dev.allocate<float>(param_count_v<L>), y = dev.allocate<float>(5);
  L l;
  const std::string msg = dtrain_test::error_of([&] { l.forward(ctx, x.data(), y.data(), 2, p.data()); });
  BOOST_TEST(msg.find("of an allocation of 5") != std::string::npos, msg);
}

BOOST_AUTO_TEST_SUITE_END()
