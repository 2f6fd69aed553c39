// Text for language models: the character vocabulary (Keras TextVectorization's rules) and next-token
// windows (a source: shuffled, sharded, batched and resumed like the others).
#include <filesystem>
#include <fstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/data/stages.hpp>
#include <dtrain/data/text.hpp>

using namespace dtrain;
using dtrain_test::error_of;
namespace fs = std::filesystem;

namespace {
std::vector<std::int32_t> ids_to(std::int32_t n) {
  std::vector<std::int32_t> v(std::size_t(n), 0);
  for (std::int32_t i = 0; i < n; ++i) v[std::size_t(i)] = i;
  return v;
}
std::vector<float> flat(const tensor& t) { return {t.data(), t.data() + t.size()}; }
}  // namespace

BOOST_AUTO_TEST_SUITE(text)

BOOST_AUTO_TEST_CASE(the_vocabulary_is_keras_most_frequent_first_ties_in_descending_order) {
  data::text_vectorization v;
  v.adapt("abracadabra");  // a 5, b 2, r 2, c 1, d 1
  BOOST_TEST((v.get_vocabulary() == std::vector<std::string>{"", "[UNK]", "a", "r", "b", "d", "c"}));
  BOOST_TEST((v("cab!") == std::vector<std::int32_t>{6, 2, 4, data::text_vectorization::oov}));
  const std::vector<std::int32_t> ids = v("bad");
  BOOST_TEST(v.decode(ids) == "bad");
  // max_tokens counts "" and [UNK]: the two most frequent characters remain
  data::text_vectorization small({.max_tokens = 4});
  small.adapt("abracadabra");
  BOOST_TEST((small.get_vocabulary() == std::vector<std::string>{"", "[UNK]", "a", "r"}));
  BOOST_TEST((small("bar") == std::vector<std::int32_t>{1, 2, 3}));
  // a given vocabulary, as Keras' vocabulary= argument
  data::text_vectorization given({"x", "y"}, {});
  BOOST_TEST((given("yxz") == std::vector<std::int32_t>{3, 2, 1}));
}

BOOST_AUTO_TEST_CASE(characters_are_code_points_and_malformed_bytes_become_the_replacement_character) {
  data::text_vectorization v;
  v.adapt("h\xC3\xA9\xC3\xA9\xE2\x82\xAC");  // h, é twice, €
  // é first; h and € once each, € (bytes E2 82 AC) before h (68)
  BOOST_TEST((v.get_vocabulary() == std::vector<std::string>{"", "[UNK]", "\xC3\xA9", "\xE2\x82\xAC", "h"}));
  // a lone continuation byte, a truncated sequence, an overlong '/' and a surrogate: U+FFFD each
  data::text_vectorization bad;
  bad.adapt("a\x80" "b\xC3" "c\xC0\xAF" "d\xED\xA0\x80");
  const auto& voc = bad.get_vocabulary();
  BOOST_TEST(std::count(voc.begin(), voc.end(), "\xEF\xBF\xBD") == 1);
  BOOST_TEST(voc[2] == "\xEF\xBF\xBD");  // 1 + 1 + 2 + 3 replacements: the most frequent
  BOOST_TEST(bad("\xC3\xA9").size() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_vocabularies_and_indices_are_errors_that_say_why) {
  BOOST_TEST(error_of([] { data::text_vectorization({.max_tokens = 2}); }).find("max_tokens 2") != std::string::npos);
  BOOST_TEST(error_of([] { data::text_vectorization({"a", "a"}, {}); }).find("\"a\" twice") != std::string::npos);
  BOOST_TEST(error_of([] { data::text_vectorization({"ab"}, {}); }).find("\"ab\" is not one character") !=
             std::string::npos);
  BOOST_TEST(error_of([] { data::text_vectorization({"a", "b", "c"}, {.max_tokens = 4}); }).find("max_tokens 4") !=
             std::string::npos);
  data::text_vectorization v({"a"}, {});
  const std::vector<std::int32_t> ids{2, 3};
  BOOST_TEST(error_of([&] { v.decode(ids); }).find("index 3 at position 1") != std::string::npos);
  BOOST_TEST(error_of([] { data::read_text("/nonexistent/corpus.txt"); }).find("/nonexistent/corpus.txt") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(windows_pair_each_token_with_the_next) {
  // 10 ids, sequence 3: windows of 4 without overlap start at 0 and 4 (8 and 9 make no window)
  const auto w = data::next_token_windows(ids_to(10), 3);
  BOOST_TEST(w.cardinality() == 2);
  auto it = w.iterate(0);
  auto a = it.next(), b = it.next();
  BOOST_REQUIRE(a && b);
  BOOST_TEST((flat(a->first) == std::vector<float>{0, 1, 2}));
  BOOST_TEST((flat(a->second) == std::vector<float>{1, 2, 3}));
  BOOST_TEST((flat(b->first) == std::vector<float>{4, 5, 6}));
  BOOST_TEST((flat(b->second) == std::vector<float>{5, 6, 7}));
  BOOST_TEST(!it.next());
  // a stride of sequence_length: every id from the second on is a target exactly once
  const auto every = data::next_token_windows(ids_to(10), 3, 3);
  BOOST_TEST(every.cardinality() == 3);
  std::vector<float> targets;
  for (auto i = every.iterate(0); auto e = i.next();)
    for (float t : flat(e->second)) targets.push_back(t);
  BOOST_TEST((targets == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  BOOST_TEST(error_of([] { data::next_token_windows(ids_to(3), 3); }).find("3 tokens make no window of 4") !=
             std::string::npos);
  BOOST_TEST(error_of([] { data::next_token_windows(ids_to(3), 0); }).find("sequence_length") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_text_pipeline_shards_batches_and_resumes_mid_epoch) {
  dtrain_test::temp_dir t;
  const fs::path corpus = t.path / "corpus.txt";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
  std::ofstream(corpus) << text;
  data::text_vectorization v;
  const std::string read = data::read_text(corpus);
  BOOST_TEST(read == text);
  v.adapt(read);
  auto windows = data::next_token_windows(v(read), 16);
  BOOST_TEST(windows.cardinality() == std::int64_t((text.size() - 17) / 17 + 1));
  // three workers' shards are disjoint and together every window (distinct ids: windows tell apart)
  const auto numbered = data::next_token_windows(ids_to(200), 16);
  std::set<std::vector<float>> seen;
  for (std::size_t w = 0; w < 3; ++w)
    for (auto it = (numbered | data::shard(3, w)).iterate(0); auto e = it.next();)
      BOOST_TEST(seen.insert(flat(e->first)).second);
  BOOST_TEST(seen.size() == std::size_t(numbered.cardinality()));
  // a shuffled, batched pass resumed from a saved position yields what the uninterrupted one does
  const auto ds = windows | data::shuffle(64, 7) | data::repeat() | data::batch(4, true);
  auto whole = data::make_iterator(ds, 1);
  for (int i = 0; i < 5; ++i) whole.next();
  const nlohmann::json saved = whole.save();
  std::vector<std::vector<float>> rest;
  for (int i = 0; i < 10; ++i) rest.push_back(flat(whole.next()->first));
  auto resumed = data::make_iterator(ds);
  resumed.restore(saved);
  for (int i = 0; i < 10; ++i) {
    const auto e = resumed.next();
    BOOST_REQUIRE(e);
    BOOST_TEST(e->first.shape()[0] == 4u);
    BOOST_TEST(e->first.shape()[1] == 16u);
    BOOST_TEST(flat(e->first) == rest[std::size_t(i)], boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
