// Dataset sources and stages (tf.data semantics), exact resume of iterators, IDX and Fashion-MNIST files.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/data/fashion_mnist.hpp>
#include <dtrain/data/stages.hpp>

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;

namespace {
/// x: rows i = (i, 10 i), y: i; so each element says which row it came from.
data::tensor_slices<data::example> numbered(std::size_t n) {
  tensor x = zeros({n, 2}), y = zeros({n});
  for (std::size_t i = 0; i < n; ++i) x(i, 0) = float(i), x(i, 1) = 10.0f * float(i), y(i) = float(i);
  return data::from_tensor_slices(x, y);
}
template <class D>
std::vector<float> labels_of(const D& d, std::uint64_t pass = 0, std::size_t limit = 1000) {
  std::vector<float> out;
  auto it = d.iterate(pass);
  while (out.size() < limit) {
    auto e = it.next();
    if (!e) break;
    for (float v : e->second) out.push_back(v);
  }
  return out;
}
std::vector<float> iota(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float(i);
  return v;
}

void write_idx(const fs::path& p, std::vector<std::uint32_t> dims, std::size_t data_bytes, bool gz,
               unsigned char type = 0x08, unsigned char fill = 7) {
  std::vector<unsigned char> b{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (auto d : dims) b.insert(b.end(), {static_cast<unsigned char>(d >> 24), static_cast<unsigned char>(d >> 16),
                                          static_cast<unsigned char>(d >> 8), static_cast<unsigned char>(d)});
  for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>((fill + i) % 10));
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(data_pipeline)

BOOST_AUTO_TEST_CASE(slices_batch_and_cardinality) {
  auto ds = numbered(10);
  BOOST_TEST(ds.cardinality() == 10);
  BOOST_TEST(labels_of(ds) == iota(10), boost::test_tools::per_element());
  auto b = ds | data::batch(4);
  BOOST_TEST(b.cardinality() == 3);
  auto it = b.iterate(0);
  auto first = it.next();
  BOOST_TEST((extents_of(first->first) == extents{4, 2}));
  BOOST_TEST(first->first(3, 1) == 30.0f);
  it.next();
  BOOST_TEST(it.next()->second.size() == 2u);  // the remainder
  BOOST_TEST(!it.next());
  BOOST_TEST((ds | data::batch(4, true)).cardinality() == 2);
  BOOST_TEST(labels_of(ds | data::batch(4, true)).size() == 8u);
  BOOST_CHECK_THROW(data::batch(0), value_error);
}

BOOST_AUTO_TEST_CASE(zip_unbatch_and_from_generator) {
  // zip: two tensor datasets into (x, y) examples, as long as the shorter
  tensor x = zeros({5, 2}), y = zeros({3});
  for (std::size_t i = 0; i < 5; ++i) x(i, 0) = float(i);
  for (std::size_t i = 0; i < 3; ++i) y(i) = 10.0f + float(i);
  auto zipped = data::zip(data::from_tensor_slices(x), data::from_tensor_slices(y));
  static_assert(std::is_same_v<decltype(zipped)::element_type, data::example>);
  BOOST_TEST(zipped.cardinality() == 3);
  BOOST_TEST(labels_of(zipped) == (std::vector<float>{10, 11, 12}), boost::test_tools::per_element());
  BOOST_TEST(data::zip(data::from_tensor_slices(x) | data::repeat(), data::from_tensor_slices(y)).cardinality() == 3);
  // unbatch undoes batch, an uneven last batch included; skip lands where next would have
  auto rows = numbered(7) | data::batch(3) | data::unbatch();
  BOOST_TEST(labels_of(rows) == iota(7), boost::test_tools::per_element());
  auto it = rows.iterate(0);
  BOOST_TEST(it.skip(4) == 4);
  const auto fifth = it.next();
  BOOST_TEST(fifth->second() == 4.0f);
  BOOST_TEST((extents_of(fifth->first) == extents{2}));
  BOOST_TEST(fifth->first(1) == 40.0f);
  // an example whose x has 2 rows and y 1 cannot be unbatched; a scalar has no rows
  auto uneven = data::from_generator([] {
    return [done = false]() mutable -> std::optional<data::example> {
      if (std::exchange(done, true)) return std::nullopt;
      return data::example{zeros({2, 3}), zeros({1})};
    };
  }) | data::unbatch();
  BOOST_TEST(error_of([&] { uneven.iterate(0).next(); }).find("x has 2 rows and its y 1") != std::string::npos);
  BOOST_CHECK_THROW((data::from_tensor_slices(y) | data::unbatch()).iterate(0).next(), shape_error);
  // from_generator: a new generator each pass; a saved iterator resumes by replaying
  auto counted = data::from_generator([] {
    return [i = 0]() mutable -> std::optional<data::example> {
      if (i == 6) return std::nullopt;
      ++i;
      return data::example{from_span(std::vector<float>{float(i)}, {1}), from_span(std::vector<float>{float(i - 1)}, {1})};
    };
  }, 6);
  BOOST_TEST(counted.cardinality() == 6);
  BOOST_TEST(labels_of(counted) == iota(6), boost::test_tools::per_element());
  BOOST_TEST(labels_of(counted | data::batch(4)) == iota(6), boost::test_tools::per_element());
  data::iterator resumed(counted);
  resumed.next(), resumed.next();
  data::iterator again(counted);
  again.restore(resumed.state());
  BOOST_TEST(again.next()->second(0) == 2.0f);
}

BOOST_AUTO_TEST_CASE(padded_batch_pads_to_the_longest) {
  // sequences of lengths 1, 3, 2 (values i + 1), labels of one value: a batch of 3 padded with -1
  auto seqs = data::from_generator([] {
    return [i = 0]() mutable -> std::optional<data::example> {
      if (i == 3) return std::nullopt;
      const std::size_t len = i == 0 ? 1 : i == 1 ? 3 : 2;
      tensor x = zeros({len, 2});
      for (std::size_t r = 0; r < len; ++r) x(r, 0) = float(i + 1), x(r, 1) = float(r);
      ++i;
      return data::example{x, from_span(std::vector<float>{float(i)}, {1})};
    };
  });
  auto it = (seqs | data::padded_batch(3, -1.0f)).iterate(0);
  const auto b = it.next();
  BOOST_TEST((extents_of(b->first) == extents{3, 3, 2}));
  BOOST_TEST(b->first(0, 0, 0) == 1.0f);
  BOOST_TEST(b->first(0, 1, 0) == -1.0f);  // padding after the one row
  BOOST_TEST(b->first(1, 2, 1) == 2.0f);
  BOOST_TEST(b->first(2, 1, 0) == 3.0f);
  BOOST_TEST(b->first(2, 2, 1) == -1.0f);
  BOOST_TEST((extents_of(b->second) == extents{3, 1}));
  BOOST_TEST(!it.next());
  // ranks that differ are a shape error naming the element
  auto mixed = data::from_generator([] {
    return [i = 0]() mutable -> std::optional<tensor> {
      if (i == 2) return std::nullopt;
      return i++ == 0 ? zeros({2}) : zeros({2, 2});
    };
  });
  BOOST_TEST(error_of([&] { (mixed | data::padded_batch(2)).iterate(0).next(); }).find("element 1 has shape (2, 2)") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(lists_of_tensors_slice_batch_and_shuffle_together) {
  // ((x1, x2), (y1, y2)): each element holds row i of every tensor; a batch stacks each on its own
  tensor x1 = zeros({5, 2}), x2 = zeros({5, 3, 1}), y1 = zeros({5}), y2 = zeros({5, 1});
  for (std::size_t i = 0; i < 5; ++i)
    x1(i, 1) = float(i), x2(i, 2, 0) = 10.0f * float(i), y1(i) = 100.0f * float(i), y2(i, 0) = -float(i);
  auto ds = data::from_tensor_slices({x1, x2}, {y1, y2}) | data::shuffle(5, 4) | data::batch(2);
  static_assert(std::is_same_v<decltype(ds)::element_type, data::multi_example>);
  std::size_t rows = 0;
  auto it = ds.iterate(0);
  while (auto b = it.next()) {
    BOOST_REQUIRE_EQUAL(b->first.size(), 2u);
    BOOST_REQUIRE_EQUAL(b->second.size(), 2u);
    const std::size_t n = b->first[0].shape()[0];
    BOOST_TEST((extents_of(b->first[1]) == extents{n, 3, 1}));
    BOOST_TEST((extents_of(b->second[1]) == extents{n, 1}));
    for (std::size_t r = 0; r < n; ++r) {  // the components of a row stay together through the shuffle
      const float i = b->first[0](r, 1);
      BOOST_TEST(b->first[1](r, 2, 0) == 10.0f * i);
      BOOST_TEST(b->second[0](r) == 100.0f * i);
      BOOST_TEST(b->second[1](r, 0) == -i);
    }
    rows += n;
  }
  BOOST_TEST(rows == 5u);
  const tensor short_y = zeros({4});
  BOOST_TEST(error_of([&] { data::from_tensor_slices({x1, x2}, {y1, short_y}); }).find(
                 "features of shape (5, 2) and labels 1 of shape (4,) do not have the same first extent") !=
             std::string::npos);
  BOOST_TEST(error_of([&] { data::from_tensor_slices(std::vector<tensor>{}); }).find("no features") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(shuffle_permutes_with_seeded_reshuffles) {
  auto ds = numbered(50);
  auto s = ds | data::shuffle(16, 3);
  const auto a = labels_of(s, 0), a2 = labels_of(s, 0), b = labels_of(s, 1);
  const auto all = iota(50);
  BOOST_TEST((std::multiset<float>(a.begin(), a.end()) == std::multiset<float>(all.begin(), all.end())));
  BOOST_TEST(a != iota(50));
  BOOST_TEST(a == a2, boost::test_tools::per_element());  // same seed, same pass
  BOOST_TEST(a != b);                                     // reshuffled on the next pass
  BOOST_TEST(labels_of(ds | data::shuffle(16, 3, false), 1) == labels_of(ds | data::shuffle(16, 3, false), 0),
             boost::test_tools::per_element());
  BOOST_TEST(labels_of(ds | data::shuffle(16, 4)) != a);  // another seed
  BOOST_TEST(labels_of(ds | data::shuffle(1)) == iota(50), boost::test_tools::per_element());
  // a buffer of 16 cannot move element 40 to the front
  BOOST_TEST(a.front() < 16.0f);
}

BOOST_AUTO_TEST_CASE(repeat_take_skip_filter_shard) {
  auto ds = numbered(5);
  BOOST_TEST((ds | data::repeat(3)).cardinality() == 15);
  BOOST_TEST((ds | data::repeat()).cardinality() == data::infinite);
  auto r = labels_of(ds | data::repeat(2));
  BOOST_TEST(r == (std::vector<float>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(labels_of(ds | data::repeat() | data::take(12)).size() == 12u);
  BOOST_TEST((ds | data::repeat() | data::take(12)).cardinality() == 12);
  BOOST_TEST(labels_of(ds | data::skip(3)) == (std::vector<float>{3, 4}), boost::test_tools::per_element());
  BOOST_TEST(labels_of(ds | data::filter([](const data::example& e) { return e.second(0) != 2.0f; })) ==
                 (std::vector<float>{0, 1, 3, 4}),
             boost::test_tools::per_element());
  // three shards: disjoint, together everything
  std::vector<float> all;
  for (int i = 0; i < 3; ++i) {
    auto sh = numbered(11) | data::shard(3, i);
    const auto part = labels_of(sh);
    BOOST_TEST(sh.cardinality() == std::int64_t(part.size()));
    for (float v : part) BOOST_TEST(int(v) % 3 == i);
    all.insert(all.end(), part.begin(), part.end());
  }
  std::sort(all.begin(), all.end());
  BOOST_TEST(all == iota(11), boost::test_tools::per_element());
  BOOST_CHECK_THROW(data::shard(2, 2), value_error);
  // an empty dataset repeated forever ends instead of spinning
  BOOST_TEST(labels_of(ds | data::take(0) | data::repeat()).empty());
}

BOOST_AUTO_TEST_CASE(map_parallel_prefetch_cache_reduce_options) {
  auto ds = numbered(23);
  auto twice = [](data::example e) {
    e.second *= 2.0f;
    return e;
  };
  const auto serial = labels_of(ds | data::map(twice));
  BOOST_TEST(serial[5] == 10.0f);
  BOOST_TEST(labels_of(ds | data::map(twice, 4)) == serial, boost::test_tools::per_element());
  {  // on the thread pool: an exception from f reaches the caller, with 1 and 2 threads
    const int before = num_threads();
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto failing = ds | data::map(
                              [](data::example e) {
                                if (e.second(0) == 6.0f) throw std::runtime_error("bad element 6");
                                return e;
                              },
                              4);
      BOOST_CHECK_EXCEPTION(labels_of(failing), std::runtime_error,
                            [](const std::runtime_error& e) { return std::string(e.what()) == "bad element 6"; });
    }
    set_num_threads(before);
  }
  BOOST_TEST(labels_of(ds | data::shuffle(8) | data::prefetch(3)) == labels_of(ds | data::shuffle(8)),
             boost::test_tools::per_element());
  int calls = 0;
  auto counted = ds | data::map([&calls](data::example e) {
                   ++calls;
                   return e;
                 }) |
                 data::cache();
  const auto first = labels_of(counted, 0), second = labels_of(counted, 1);
  BOOST_TEST(first == second, boost::test_tools::per_element());
  BOOST_TEST(calls == 23);  // the second pass came from the cache
  const float total = data::reduce(ds, 0.0f, [](float acc, const data::example& e) { return acc + e.second(0); });
  BOOST_TEST(total == 253.0f);
  auto with = ds | data::with_options({.auto_shard = data::auto_shard_policy::data}) | data::batch(2);
  BOOST_TEST((with.options().auto_shard == data::auto_shard_policy::data));
  BOOST_TEST((ds.options().auto_shard == data::auto_shard_policy::auto_));
}

BOOST_AUTO_TEST_CASE(file_cache_is_written_once_and_reused) {
  temp_dir t;
  const std::string file = (t.path / "cache.bin").string();
  int calls = 0;
  auto counted = numbered(9) | data::map([&calls](data::example e) {
                   ++calls;
                   return e;
                 });
  auto cached = counted | data::cache(file);
  auto partial = cached.iterate(0);
  partial.next();  // an unfinished pass publishes nothing
  BOOST_TEST(!fs::exists(file));
  const auto first = labels_of(cached, 0);
  BOOST_TEST(fs::exists(file));
  const int after_first = calls;
  const auto second = labels_of(counted | data::cache(file), 1);  // another pipeline object, same file
  BOOST_TEST(first == second, boost::test_tools::per_element());
  BOOST_TEST(calls == after_first);  // read from the file
  BOOST_TEST(first == iota(9), boost::test_tools::per_element());
  std::ofstream(t.path / "bad.bin") << "garbage";
  BOOST_TEST(error_of([&] { labels_of(counted | data::cache((t.path / "bad.bin").string())); }).find("not a dtrain cache file") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(restored_iterators_continue_exactly) {
  // the tutorial's pipeline plus the other stages: shuffle, map, repeat, shard, batch, prefetch
  auto ds = numbered(37) | data::shuffle(10, 5) | data::map([](data::example e) { return e; }, 2) | data::repeat() |
            data::shard(2, 1) | data::batch(4) | data::prefetch(2);
  for (std::int64_t cut : {0, 1, 3, 4, 5, 9, 10, 23}) {
    auto straight = data::make_iterator(ds, 7);
    std::vector<std::vector<float>> expect;
    for (std::int64_t i = 0; i < cut + 6; ++i) {
      auto e = straight.next();
      expect.emplace_back(e->second.begin(), e->second.end());
    }
    auto first = data::make_iterator(ds, 7);
    for (std::int64_t i = 0; i < cut; ++i) first.next();
    const nlohmann::json saved = first.save();
    auto resumed = data::make_iterator(ds);
    resumed.restore(nlohmann::json::parse(saved.dump()));
    for (std::int64_t i = cut; i < cut + 6; ++i) {
      auto e = resumed.next();
      BOOST_TEST_CONTEXT("cut " << cut << " element " << i) {
        BOOST_TEST(std::vector<float>(e->second.begin(), e->second.end()) == expect[std::size_t(i)],
                   boost::test_tools::per_element());
      }
    }
  }
  // a position past the end of a finite dataset is refused
  auto finite = data::make_iterator(numbered(4) | data::batch(2));
  BOOST_CHECK_THROW(finite.restore(data::iterator_state{0, 3}), value_error);
  BOOST_CHECK_THROW(finite.restore(nlohmann::json{{"iteration", 0}}), value_error);
}

BOOST_AUTO_TEST_CASE(idx_files_plain_and_gzip) {
  temp_dir t;
  write_idx(t.path / "a.idx", {2, 3}, 6, false);
  write_idx(t.path / "b.idx.gz", {2, 3}, 6, true);
  const tensor a = data::read_idx(t.path / "a.idx"), b = data::read_idx(t.path / "b.idx.gz");
  BOOST_TEST((extents_of(a) == extents{2, 3}));
  BOOST_TEST(a(1, 2) == float((7 + 5) % 10));
  BOOST_TEST(a == b);
}

BOOST_AUTO_TEST_CASE(corrupt_and_missing_files_are_named) {
  temp_dir t;
  std::string m = error_of([&] { data::read_idx(t.path / "nope.idx"); });
  BOOST_TEST(m.find("nope.idx") != std::string::npos);
  std::ofstream(t.path / "garbage.idx") << "hello world, not idx";
  m = error_of([&] { data::read_idx(t.path / "garbage.idx"); });
  BOOST_TEST(m.find("garbage.idx: bad IDX magic") != std::string::npos);
  write_idx(t.path / "short.idx.gz", {100, 28, 28}, 5000, true);
  m = error_of([&] { data::read_idx(t.path / "short.idx.gz"); });
  BOOST_TEST(m.find("short.idx.gz: truncated") != std::string::npos);
  BOOST_TEST(m.find("(100, 28, 28)") != std::string::npos);

  // Fashion-MNIST: a missing folder names the file and the package
  m = error_of([&] { data::load_fashion_mnist(data::split::test, t.path / "absent"); });
  BOOST_TEST(m.find("t10k-images-idx3-ubyte.gz not found") != std::string::npos);
  BOOST_TEST(m.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  {  // ... and where DTRAIN_FASHION_MNIST_DIR names the folder, says so instead of asking to set it
    const char* was = std::getenv("DTRAIN_FASHION_MNIST_DIR");
    const std::string before = was ? was : "";
    ::setenv("DTRAIN_FASHION_MNIST_DIR", (t.path / "absent").c_str(), 1);
    m = error_of([&] { data::load_fashion_mnist(data::split::test); });
    was ? ::setenv("DTRAIN_FASHION_MNIST_DIR", before.c_str(), 1) : ::unsetenv("DTRAIN_FASHION_MNIST_DIR");
    BOOST_TEST(m.find("absent/t10k-images-idx3-ubyte.gz not found (the folder DTRAIN_FASHION_MNIST_DIR names)") !=
               std::string::npos, m);
    BOOST_TEST(m.find("or set") == std::string::npos, m);
  }
  // counts that disagree
  write_idx(t.path / "t10k-images-idx3-ubyte.gz", {3, 28, 28}, 3 * 784, true);
  write_idx(t.path / "t10k-labels-idx1-ubyte.gz", {2}, 2, true);
  m = error_of([&] { data::load_fashion_mnist(data::split::test, t.path); });
  BOOST_TEST(m.find("has 3 images but") != std::string::npos);
  BOOST_TEST(m.find("has 2 labels") != std::string::npos);
  // a hostile file: labels outside 0..9: -1 as int8 (type 0x09), NaN as float32 (type 0x0D)
  const auto labels = [&](unsigned char type, std::vector<unsigned char> data) {
    std::vector<unsigned char> b{0, 0, type, 1, 0, 0, 0, 3};
    b.insert(b.end(), data.begin(), data.end());
    gzFile f = gzopen((t.path / "t10k-labels-idx1-ubyte.gz").c_str(), "wb");
    gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
    gzclose(f);
    return error_of([&] { data::load_fashion_mnist(data::split::test, t.path); });
  };
  m = labels(0x09, {1, 0xff, 2});
  BOOST_TEST(m.find("label -1.000000 at index 1 is not a class in 0..9") != std::string::npos, m);
  m = labels(0x0D, {0x7f, 0xc0, 0, 0, 0x7f, 0xc0, 0, 0, 0x7f, 0xc0, 0, 0});  // big-endian quiet NaNs
  BOOST_TEST(m.find("label nan at index 0") != std::string::npos, m);
  // a hostile file: dimensions whose product wraps around 2^64 are refused, not read as an empty tensor
  write_idx(t.path / "wrap.idx", {65536, 65536, 65536, 65536}, 16, false);
  BOOST_TEST(error_of([&] { data::read_idx(t.path / "wrap.idx"); }).find("more than 4294967296 values") != std::string::npos);
  // and a good small set loads, scaled to [0, 1]
  write_idx(t.path / "t10k-labels-idx1-ubyte.gz", {3}, 3, true);
  auto [x, y] = data::load_fashion_mnist(data::split::test, t.path);
  BOOST_TEST((extents_of(x) == extents{3, 28, 28}));
  BOOST_TEST(x(0, 0, 0) == 7.0f / 255.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(y(2) == 9.0f);
}

BOOST_AUTO_TEST_CASE(real_fashion_mnist_when_installed) {
  if (!fs::exists(data::fashion_mnist_dir() / "t10k-labels-idx1-ubyte.gz")) {
    BOOST_TEST_MESSAGE("dataset-fashion-mnist not installed: skipped");
    return;
  }
  auto [x, y] = data::load_fashion_mnist(data::split::test);
  BOOST_TEST((extents_of(x) == extents{10000, 28, 28}));
  BOOST_TEST(xt::amax(x)() <= 1.0f);
  std::vector<int> per(10, 0);
  for (float v : y) ++per[std::size_t(v)];
  for (int c : per) BOOST_TEST(c == 1000);  // the test split is balanced
}

BOOST_AUTO_TEST_SUITE_END()
