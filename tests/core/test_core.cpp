#include <numeric>

#include "support/gradcheck.hpp"

using namespace dtrain;

BOOST_AUTO_TEST_SUITE(core)

BOOST_AUTO_TEST_CASE(rng_is_seeded_and_its_state_round_trips) {
  rng a(42), b(42), c(43);
  BOOST_TEST(a.next() == b.next());
  BOOST_TEST(a.next() != c.next());
  // The standard fixes mt19937_64's 10000th output for the default seed 5489.
  rng d(5489);
  std::uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = d.next();
  BOOST_TEST(v == 9981545732273789042ull);
  const std::string saved = a.state();
  const float u1 = a.uniform(), n1 = a.normal();
  a.set_state(saved);
  BOOST_TEST(a.uniform() == u1);
  BOOST_TEST(a.normal() == n1);
  BOOST_CHECK_THROW(a.set_state("not a state"), value_error);
}

BOOST_AUTO_TEST_CASE(rng_distributions) {
  rng r(1);
  double s = 0, s2 = 0;
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 20000; ++i) {
    const float u = r.uniform();
    BOOST_REQUIRE(u >= 0.0f);
    BOOST_REQUIRE(u < 1.0f);
    const double z = r.normal();
    s += z, s2 += z * z;
    ++hist[r.below(7)];
  }
  BOOST_TEST(std::abs(s / 20000) < 0.05);
  BOOST_TEST(std::abs(s2 / 20000 - 1.0) < 0.05);
  for (int h : hist) BOOST_TEST(std::abs(h - 20000 / 7.0) < 300);
}

BOOST_AUTO_TEST_CASE(shapes) {
  static_assert(shape<28, 28, 1>::size == 784 && shape<28, 28, 1>::rank == 3);
  BOOST_TEST((shape<26, 26, 32>::str() == "(None, 26, 26, 32)"));
  BOOST_TEST(shape_str(std::vector<std::size_t>{32}) == "(32,)");
  BOOST_TEST(shape_str(std::vector<std::size_t>{2, 3}) == "(2, 3)");
}

// Random123's known-answer vectors for Philox4x32-10 (kat_vectors): counter, key -> output.
BOOST_AUTO_TEST_CASE(philox_known_answers) {
  BOOST_TEST((philox4x32({0, 0, 0, 0}, 0) == std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  BOOST_TEST((philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffffffffffffull) ==
              std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  BOOST_TEST((philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0x299f31d0a4093822ull) ==
              std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // uniforms: 24 bits of each word, in [0, 1)
  const auto u = counter_uniform4(0, 0);
  BOOST_TEST(u[0] == static_cast<float>(0x6627e8d5u >> 8) * 0x1.0p-24f);
  double s = 0;
  for (std::uint64_t b = 0; b < 5000; ++b)
    for (float v : counter_uniform4(42, b)) {
      BOOST_REQUIRE(v >= 0.0f);
      BOOST_REQUIRE(v < 1.0f);
      s += v;
    }
  BOOST_TEST(s / 20000 == 0.5, boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(tensor_helpers) {
  tensor a = from_span(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  tensor b = from_span(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2});
  tensor c = matmul(a, b);
  BOOST_TEST(c(0, 0) == 4.0f);
  BOOST_TEST(c(1, 1) == 11.0f);
  BOOST_CHECK_THROW(matmul(a, a), shape_error);
  BOOST_CHECK_THROW(from_span(std::vector<float>{1, 2, 3}, {2, 2}), shape_error);
  BOOST_TEST((extents_of(zeros({4, 1, 2})) == extents{4, 1, 2}));
}

BOOST_AUTO_TEST_CASE(errors_share_one_base) {
  BOOST_CHECK_THROW(throw shape_error("x"), error);
  BOOST_CHECK_THROW(throw io_error("x"), error);
  BOOST_CHECK_THROW(throw config_error("x"), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(thread_budget) {
  const int before = num_threads();
  set_num_threads(1);
  BOOST_TEST(num_threads() == 1);
  set_num_threads(0);  // clamped
  BOOST_TEST(num_threads() == 1);
  set_num_threads(before);
}

BOOST_AUTO_TEST_SUITE_END()
