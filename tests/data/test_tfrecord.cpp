// TFRecord files (plain, GZIP, ZLIB; records framed and checksummed here as TensorFlow's writer frames
// them) read back record by record and resumed by skipping; damaged files named with the record's
// offset; tf.train.Example records (encoded here field by field) parsed into fixed- and variable-length
// features, with defaults, SequenceExamples into their context and feature lists, and every mismatch an
// error.
#include "support/gradcheck.hpp"

#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <dtrain/data/tfrecord.hpp>

#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::uint32_t masked(const std::string& s) {
  const std::uint32_t c = dtrain::detail::crc32c_bytes(reinterpret_cast<const unsigned char*>(s.data()), s.size(), 0);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
/// Records in TFRecord framing: length, its masked CRC-32C, data, the data's.
std::string framed(const std::vector<std::string>& records) {
  std::string out;
  for (const auto& r : records) {
    std::string len(8, '\0');
    const std::uint64_t n = r.size();
    std::memcpy(len.data(), &n, 8);
    const std::uint32_t c1 = masked(len), c2 = masked(r);
    out += len + std::string(reinterpret_cast<const char*>(&c1), 4) + r + std::string(reinterpret_cast<const char*>(&c2), 4);
  }
  return out;
}
void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
std::vector<std::string> all(const data::tfrecord_dataset& d) {
  std::vector<std::string> out;
  auto it = d.iterate(0);
  while (auto r = it.next()) out.push_back(*r);
  return out;
}
// ---- protobuf's wire format, written field by field -------------------------------------------------------
std::string varint(std::uint64_t v) {
  std::string out;
  do {
    out += char((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}
std::string field(int number, const std::string& bytes) { return varint(std::uint64_t(number) << 3 | 2) + varint(bytes.size()) + bytes; }
std::string floats(const std::vector<float>& v) {  // Feature { float_list = 2 { value = 1 (packed) } }
  return field(2, field(1, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)));
}
std::string int64s(const std::vector<std::int64_t>& v, bool packed = true) {  // Feature { int64_list = 3 }
  std::string values;
  for (auto x : v) values += packed ? varint(std::uint64_t(x)) : varint(1u << 3 | 0) + varint(std::uint64_t(x));
  return field(3, packed ? field(1, values) : values);
}
std::string strings(const std::vector<std::string>& v) {  // Feature { bytes_list = 1 }
  std::string values;
  for (const auto& s : v) values += field(1, s);
  return field(1, values);
}
/// Example { features = 1 { feature = 1: map entries { key = 1, value = 2 } } }
std::string example(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string entries;
  for (const auto& [k, v] : features) entries += field(1, field(1, k) + field(2, v));
  return field(1, entries);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(tfrecord)

BOOST_AUTO_TEST_CASE(records_of_every_file_in_turn_plain_gzip_and_zlib) {
  temp_dir t;
  const std::vector<std::string> a{"first", "", std::string(70000, 'x')}, b{"fourth", "fifth"};
  write(t.path / "a.tfrecord", framed(a));
  write(t.path / "b.tfrecord", framed(b));
  const std::vector<std::string> want{"first", "", std::string(70000, 'x'), "fourth", "fifth"};
  BOOST_TEST(all(data::tfrecord_dataset({(t.path / "a.tfrecord").string(), (t.path / "b.tfrecord").string()})) == want);
  // GZIP (a gzip stream) and ZLIB (a zlib stream) hold the same bytes
  gzFile gz = gzopen((t.path / "a.gz").c_str(), "wb");
  const std::string plain = framed(a);
  gzwrite(gz, plain.data(), unsigned(plain.size()));
  gzclose(gz);
  BOOST_TEST(all(data::tfrecord_dataset({(t.path / "a.gz").string()}, "GZIP")) == a);
  std::string z(compressBound(uLong(plain.size())), '\0');
  uLongf zn = uLongf(z.size());
  compress2(reinterpret_cast<Bytef*>(z.data()), &zn, reinterpret_cast<const Bytef*>(plain.data()), uLong(plain.size()), 6);
  write(t.path / "a.zlib", z.substr(0, zn));
  BOOST_TEST(all(data::tfrecord_dataset({(t.path / "a.zlib").string()}, "ZLIB")) == a);
  // a resumed iterator skips, across files
  auto it = data::tfrecord_dataset({(t.path / "a.tfrecord").string(), (t.path / "b.tfrecord").string()}).iterate(0);
  BOOST_TEST(it.skip(3) == 3);
  BOOST_TEST(*it.next() == "fourth");
  BOOST_TEST(it.skip(5) == 1);
  BOOST_CHECK_THROW(data::tfrecord_dataset({"x"}, "LZ4"), value_error);
}

BOOST_AUTO_TEST_CASE(damaged_files_name_the_file_and_the_record) {
  temp_dir t;
  const std::string good = framed({"alpha", "beta", "gamma"});
  const fs::path p = t.path / "d.tfrecord";
  auto read_back = [&](const std::string& bytes) {
    write(p, bytes);
    return error_of([&] { all(data::tfrecord_dataset({p.string()})); });
  };
  std::string data_flip = good;
  data_flip[16 + 5 + 12 + 1] ^= 1;  // inside "beta"
  const std::string e = read_back(data_flip);
  BOOST_TEST(contains(e, "d.tfrecord has a record whose data fails its checksum (the record at byte 21)"), e);
  std::string length_flip = good;
  length_flip[21] ^= 1;  // beta's length
  BOOST_TEST(contains(read_back(length_flip), "length fails its checksum"));
  BOOST_TEST(contains(read_back(good.substr(0, good.size() - 2)), "ends inside a record's checksum"));
  BOOST_TEST(contains(read_back(good.substr(0, 35)), "ends inside a record (the record at byte 21)"));
  BOOST_TEST(contains(read_back(good + "xyz"), "ends inside a record's header"));
  BOOST_TEST(contains(error_of([&] { all(data::tfrecord_dataset({(t.path / "none").string()})); }), "cannot open"));
}

BOOST_AUTO_TEST_CASE(examples_parse_into_fixed_length_features) {
  const std::string record = example({{"image", floats({0.5f, -1.0f, 2.0f, 3.5f, 0.0f, 1e-3f})},
                                      {"label", int64s({7})},
                                      {"ids", int64s({-3, 1, 300000}, false)},
                                      {"name", strings({"cat.png"})}});
  const std::map<std::string, data::fixed_len_feature> spec{
      {"image", {.shape = {2, 3}}},
      {"label", {.dtype = data::feature_dtype::int64}},
      {"ids", {.shape = {3}, .dtype = data::feature_dtype::int64}},
      {"name", {.dtype = data::feature_dtype::string}},
      {"weight", {.default_value = std::vector<float>{0.25f}}}};
  const auto e = data::parse_single_example(record, spec);
  const tensor& image = e.tensors.at("image");
  BOOST_TEST((image.shape() == tensor::shape_type{2, 3}));
  BOOST_TEST(std::vector<float>(image.begin(), image.end()) == (std::vector<float>{0.5f, -1.0f, 2.0f, 3.5f, 0.0f, 1e-3f}),
             boost::test_tools::per_element());
  BOOST_TEST(e.tensors.at("label").dimension() == 0u);
  BOOST_TEST(e.tensors.at("label").data()[0] == 7.0f);
  const tensor& ids = e.tensors.at("ids");
  BOOST_TEST(std::vector<float>(ids.begin(), ids.end()) == (std::vector<float>{-3, 1, 300000}), boost::test_tools::per_element());
  BOOST_TEST(e.strings.at("name") == std::vector<std::string>{"cat.png"});
  BOOST_TEST(e.tensors.at("weight").data()[0] == 0.25f);  // missing: its default
  // unknown fields are skipped; mismatches are errors that name the feature
  const std::string padded = varint(5u << 3 | 0) + varint(99) + record;
  BOOST_TEST(data::parse_single_example(padded, spec).tensors.at("label").data()[0] == 7.0f);
  auto error = [&](const std::map<std::string, data::fixed_len_feature>& s) { return error_of([&] { data::parse_single_example(record, s); }); };
  BOOST_TEST(contains(error({{"label", {}}}), "feature 'label' is an int64_list, not a float_list"));
  BOOST_TEST(contains(error({{"image", {.shape = {4}}}}), "feature 'image' has 6 values, shape (4,) needs 4"));
  BOOST_TEST(contains(error({{"missing", {}}}), "feature 'missing' is missing and has no default_value"));
  BOOST_TEST(contains(error({{"missing", {.shape = {2}, .default_value = std::vector<float>{1, 2, 3}}}}), "default_value of 3 values"));
  BOOST_TEST(contains(error_of([&] { data::parse_single_example(record.substr(0, record.size() - 3), spec); }), "not a tf.train.Example"));
  BOOST_TEST(contains(error_of([&] { data::parse_single_example(std::string("\x0a\xff\xff\xff\xff\x0f", 6), spec); }), "runs past the end"));
}

BOOST_AUTO_TEST_CASE(var_len_features_take_however_many_values_the_record_has) {
  const std::string record = example({{"ids", int64s({-3, 1, 300000, 4})}, {"tags", strings({"a", "bc"})},
                                      {"label", int64s({7})}});
  using data::feature_dtype;
  const std::map<std::string, data::feature_spec> spec{
      {"ids", data::var_len_feature{feature_dtype::int64}},
      {"tags", data::var_len_feature{feature_dtype::string}},
      {"absent", data::var_len_feature{}},
      {"label", data::fixed_len_feature{.dtype = feature_dtype::int64}}};
  const auto e = data::parse_single_example(record, spec);
  const tensor& ids = e.tensors.at("ids");
  BOOST_TEST((ids.shape() == tensor::shape_type{4}));
  BOOST_TEST(std::vector<float>(ids.begin(), ids.end()) == (std::vector<float>{-3, 1, 300000, 4}), boost::test_tools::per_element());
  BOOST_TEST(e.strings.at("tags") == (std::vector<std::string>{"a", "bc"}));
  BOOST_TEST((e.tensors.at("absent").shape() == tensor::shape_type{0}));  // missing: no values, not an error
  BOOST_TEST(e.tensors.at("label").data()[0] == 7.0f);
  BOOST_TEST(contains(error_of([&] { data::parse_single_example(record, {{"ids", data::var_len_feature{}}}); }),
                      "feature 'ids' is an int64_list, not a float_list"));
}

BOOST_AUTO_TEST_CASE(sequence_examples_parse_their_context_and_feature_lists) {
  using data::feature_dtype;
  using ints = std::vector<std::int64_t>;
  using fs_ = std::vector<float>;
  const std::string record = data::serialize_sequence_example(
      {{"length", ints{3}}, {"title", std::vector<std::string>{"abc"}}},
      {{"tokens", {ints{1}, ints{5}, ints{9}}},
       {"frames", {fs_{0.5f, 1.0f}, fs_{-1.0f, 2.0f}, fs_{3.0f, 4.5f}}},
       {"words", {std::vector<std::string>{"a"}, std::vector<std::string>{"b"}, std::vector<std::string>{"c"}}},
       {"ragged", {fs_{1.0f}, fs_{1.0f, 2.0f}}}});
  // SequenceExample { context = 1 { Features }, feature_lists = 2 { feature_list = 1 { key, FeatureList } } },
  // map entries in key order, each FeatureList its repeated feature = 1: the wire format field by field
  auto list = [](const std::vector<std::string>& steps) {
    std::string out;
    for (const auto& f : steps) out += field(1, f);
    return out;
  };
  const std::string wire =
      field(1, field(1, field(1, "length") + field(2, int64s({3}))) + field(1, field(1, "title") + field(2, strings({"abc"})))) +
      field(2, field(1, field(1, "frames") + field(2, list({floats({0.5f, 1.0f}), floats({-1.0f, 2.0f}), floats({3.0f, 4.5f})}))) +
                   field(1, field(1, "ragged") + field(2, list({floats({1.0f}), floats({1.0f, 2.0f})}))) +
                   field(1, field(1, "tokens") + field(2, list({int64s({1}), int64s({5}), int64s({9})}))) +
                   field(1, field(1, "words") + field(2, list({strings({"a"}), strings({"b"}), strings({"c"})}))));
  BOOST_TEST(record == wire);

  const std::map<std::string, data::feature_spec> context{{"length", data::fixed_len_feature{.dtype = feature_dtype::int64}},
                                                           {"title", data::var_len_feature{feature_dtype::string}}};
  const std::map<std::string, data::fixed_len_sequence_feature> sequence{
      {"tokens", {.dtype = feature_dtype::int64}},
      {"frames", {.shape = {2}}},
      {"words", {.dtype = feature_dtype::string}},
      {"absent", {.shape = {4}, .allow_missing = true}}};
  const auto e = data::parse_single_sequence_example(record, context, sequence);
  BOOST_TEST(e.context.tensors.at("length").data()[0] == 3.0f);
  BOOST_TEST(e.context.strings.at("title") == std::vector<std::string>{"abc"});
  const tensor& tokens = e.feature_lists.tensors.at("tokens");
  BOOST_TEST((tokens.shape() == tensor::shape_type{3}));
  BOOST_TEST(std::vector<float>(tokens.begin(), tokens.end()) == (std::vector<float>{1, 5, 9}), boost::test_tools::per_element());
  const tensor& frames = e.feature_lists.tensors.at("frames");
  BOOST_TEST((frames.shape() == tensor::shape_type{3, 2}));
  BOOST_TEST(std::vector<float>(frames.begin(), frames.end()) == (std::vector<float>{0.5f, 1.0f, -1.0f, 2.0f, 3.0f, 4.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(e.feature_lists.strings.at("words") == (std::vector<std::string>{"a", "b", "c"}));
  BOOST_TEST((e.feature_lists.tensors.at("absent").shape() == tensor::shape_type{0, 4}));
  // variable-length lists: each step's values one after another, and how many each step has
  const std::map<std::string, data::sequence_feature_spec> ragged{
      {"ragged", data::var_len_feature{}}, {"words", data::var_len_feature{feature_dtype::string}},
      {"frames", data::fixed_len_sequence_feature{.shape = {2}}}, {"none", data::var_len_feature{}}};
  const auto v = data::parse_single_sequence_example(record, {}, ragged);
  const tensor& r = v.feature_lists.tensors.at("ragged");
  BOOST_TEST(std::vector<float>(r.begin(), r.end()) == (std::vector<float>{1, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(v.lengths.at("ragged") == (std::vector<std::size_t>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(v.feature_lists.strings.at("words") == (std::vector<std::string>{"a", "b", "c"}));
  BOOST_TEST(v.lengths.at("words") == (std::vector<std::size_t>{1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST((v.feature_lists.tensors.at("frames").shape() == tensor::shape_type{3, 2}));
  BOOST_TEST(!v.lengths.contains("frames"));
  BOOST_TEST(v.feature_lists.tensors.at("none").size() == 0u);  // a missing list: no steps, as in TF
  BOOST_TEST(v.lengths.at("none").empty());
  BOOST_TEST(contains(error_of([&] {
                        data::parse_single_sequence_example(record, {}, {{"tokens", data::var_len_feature{}}});
                      }),
                      "feature 'tokens' step '0' is an int64_list, not a float_list"));
  auto error = [&](const std::map<std::string, data::fixed_len_sequence_feature>& s) {
    return error_of([&] { data::parse_single_sequence_example(record, {}, s); });
  };
  BOOST_TEST(contains(error({{"ragged", {}}}), "feature 'ragged' step '1' has 2 values, shape () needs 1"));
  BOOST_TEST(contains(error({{"gone", {}}}), "feature list 'gone' is missing (allow_missing is off)"));
  BOOST_TEST(contains(error({{"tokens", {}}}), "is an int64_list, not a float_list"));
  BOOST_TEST(contains(error_of([&] { data::parse_single_sequence_example(record.substr(0, 20), {}, {}); }),
                      "not a tf.train.SequenceExample"));
}

BOOST_AUTO_TEST_CASE(the_writer_frames_records_as_tensorflow_and_puts_the_file_in_place_whole) {
  temp_dir t;
  const std::vector<std::string> records{"first", "", std::string(70000, 'x'), "fourth"};
  for (const std::string compression : {"", "GZIP", "ZLIB"}) {
    BOOST_TEST_CONTEXT("compression '" << compression << "'") {
      const fs::path p = t.path / ("out" + compression + ".tfrecord");
      {
        data::tfrecord_writer w(p, compression);
        for (const auto& r : records) w.write(r);
        BOOST_TEST(!fs::exists(p));  // not before close
        w.close();
      }
      BOOST_TEST(all(data::tfrecord_dataset({p.string()}, compression)) == records);
      if (compression.empty()) {  // the bytes TensorFlow's framing gives (framed above, by hand)
        std::ifstream in(p, std::ios::binary);
        BOOST_TEST(std::string(std::istreambuf_iterator<char>(in), {}) == framed(records));
      }
    }
  }
  // an exception while writing leaves what was there; a destructor at the end of a scope closes
  const fs::path p = t.path / "kept.tfrecord";
  { data::tfrecord_writer(p).write("old"); }
  try {
    data::tfrecord_writer w(p);
    w.write("new, partial");
    throw std::runtime_error("conversion failed");
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST(all(data::tfrecord_dataset({p.string()})) == std::vector<std::string>{"old"});
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(t.path)) ++files;
  BOOST_TEST(files == 4u);  // no temporary left behind
  data::tfrecord_writer w(t.path / "closed.tfrecord");
  w.close();
  BOOST_CHECK_THROW(w.write("late"), usage_error);
  BOOST_CHECK_THROW(data::tfrecord_writer(t.path / "x", "LZ4"), value_error);
  BOOST_CHECK_THROW(data::tfrecord_writer(t.path / "no" / "folder.tfrecord"), io_error);
}

BOOST_AUTO_TEST_CASE(serialized_examples_are_protobufs_encoding_and_parse_back) {
  const std::string got = data::serialize_example({{"image", std::vector<float>{0.5f, -1.0f}},
                                                   {"ids", std::vector<std::int64_t>{-3, 1, 300000}},
                                                   {"name", std::vector<std::string>{"cat.png", ""}},
                                                   {"empty", std::vector<float>{}}});
  // the same bytes as the wire format written field by field (map entries in name order)
  BOOST_TEST(got == example({{"empty", field(2, "")}, {"ids", int64s({-3, 1, 300000})}, {"image", floats({0.5f, -1.0f})},
                             {"name", strings({"cat.png", ""})}}));
  const auto e = data::parse_single_example(got, {{"image", {.shape = {2}}},
                                                  {"ids", {.shape = {3}, .dtype = data::feature_dtype::int64}},
                                                  {"name", {.shape = {2}, .dtype = data::feature_dtype::string}}});
  BOOST_TEST(std::vector<float>(e.tensors.at("ids").begin(), e.tensors.at("ids").end()) == (std::vector<float>{-3, 1, 300000}),
             boost::test_tools::per_element());
  BOOST_TEST(e.strings.at("name") == (std::vector<std::string>{"cat.png", ""}));
}

BOOST_AUTO_TEST_SUITE_END()
