// File sources: .npy/.npz (against numpy when Debian's python3-numpy is there), CSV, list_files and
// interleave, with corrupt inputs named in errors.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::have_numpy;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;

namespace {
int python(const std::string& code) { return std::system(("/usr/bin/python3 -c \"" + code + "\"").c_str()); }
void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
}  // namespace

BOOST_AUTO_TEST_SUITE(files)

BOOST_AUTO_TEST_CASE(npy_and_npz_round_trip) {
  temp_dir t;
  tensor a = from_span(std::vector<float>{1, -2, 3.5f, 4, 5, 6}, {2, 3});
  tensor v = from_span(std::vector<float>{7, 8}, {2});
  data::write_npy(t.path / "a.npy", a);
  BOOST_TEST(data::read_npy(t.path / "a.npy") == a);
  data::write_npz(t.path / "ab.npz", {{"x", a}, {"y", v}});
  auto m = data::read_npz(t.path / "ab.npz");
  BOOST_TEST(m.at("x") == a);
  BOOST_TEST(m.at("y") == v);
  auto ds = data::from_npz(t.path / "ab.npz");
  BOOST_TEST(ds.cardinality() == 2);
  BOOST_CHECK_THROW(data::from_npz(t.path / "ab.npz", "images", "labels"), io_error);
}

BOOST_AUTO_TEST_CASE(numpy_reads_ours_and_we_read_numpys) {
  if (!have_numpy()) {
    BOOST_TEST_MESSAGE("numpy not installed (python3-numpy): interop skipped");
    return;
  }
  temp_dir t;
  const std::string d = t.path.string();
  tensor a = from_span(std::vector<float>{1.5f, -2, 3, 4}, {2, 2});
  data::write_npz(t.path / "ours.npz", {{"w", a}});
  BOOST_TEST(python("import numpy as np; z = np.load('" + d + "/ours.npz'); assert z['w'].dtype == np.float32; "
                    "assert (z['w'] == np.array([[1.5, -2], [3, 4]], np.float32)).all()") == 0);
  BOOST_REQUIRE(python("import numpy as np; np.save('" + d + "/i.npy', np.arange(-3, 3, dtype=np.int16).reshape(2, 3)); "
                       "np.save('" + d + "/u.npy', np.array([0, 255], np.uint8)); "
                       "np.save('" + d + "/d.npy', np.array([0.25, 1e10])); "
                       "np.savez_compressed('" + d + "/c.npz', x=np.ones((3, 4), np.float32), y=np.arange(3)); "
                       "np.save('" + d + "/f.npy', np.asfortranarray(np.ones((2, 3))))") == 0);
  const tensor i = data::read_npy(t.path / "i.npy");
  BOOST_TEST((extents_of(i) == extents{2, 3}));
  BOOST_TEST(i(0, 0) == -3.0f);
  BOOST_TEST(data::read_npy(t.path / "u.npy")(1) == 255.0f);
  BOOST_TEST(data::read_npy(t.path / "d.npy")(1) == 1e10f);
  auto c = data::read_npz(t.path / "c.npz");
  BOOST_TEST(c.at("x")(2, 3) == 1.0f);
  BOOST_TEST(c.at("y")(2) == 2.0f);
  BOOST_TEST(error_of([&] { data::read_npy(t.path / "f.npy"); }).find("Fortran") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(corrupt_numpy_files) {
  temp_dir t;
  write(t.path / "bad.npy", "not numpy at all");
  BOOST_TEST(error_of([&] { data::read_npy(t.path / "bad.npy"); }).find("bad.npy: bad .npy magic") != std::string::npos);
  data::write_npy(t.path / "short.npy", zeros({10, 10}));
  fs::resize_file(t.path / "short.npy", fs::file_size(t.path / "short.npy") - 40);
  BOOST_TEST(error_of([&] { data::read_npy(t.path / "short.npy"); }).find("short.npy: truncated") != std::string::npos);
  data::write_npz(t.path / "z.npz", {{"x", from_span(std::vector<float>(100, 1.0f), {100})}});
  {  // flip a payload byte: the CRC catches it
    std::fstream f(t.path / "z.npz", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x42');
  }
  BOOST_TEST(error_of([&] { data::read_npz(t.path / "z.npz"); }).find("CRC mismatch in entry 'x.npy'") != std::string::npos);
  write(t.path / "trunc.npz", "PK\x03\x04 and then nothing");
  BOOST_TEST(error_of([&] { data::read_npz(t.path / "trunc.npz"); }).find("not a zip archive") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(csv_files) {
  temp_dir t;
  write(t.path / "ok.csv", "a,b,label\n1,2,0\n3,4.5,1\n\n5,6,2\n");
  auto [x, y] = data::read_csv(t.path / "ok.csv", {.label_column = "label"});
  BOOST_TEST((extents_of(x) == extents{3, 2}));
  BOOST_TEST(x(1, 1) == 4.5f);
  BOOST_TEST(y(2) == 2.0f);
  auto first = data::read_csv(t.path / "ok.csv", {.label_column = 0});
  BOOST_TEST(first.second(1) == 3.0f);
  write(t.path / "fields.csv", "a,b,label\n1,2,0\n3,4\n");
  BOOST_TEST(error_of([&] { data::read_csv(t.path / "fields.csv"); }).find("fields.csv:3: 2 fields, expected 3") != std::string::npos);
  write(t.path / "text.csv", "a,b,label\n1,x,0\n");
  BOOST_TEST(error_of([&] { data::read_csv(t.path / "text.csv"); }).find("text.csv:2: column 'b' holds \"x\"") != std::string::npos);
  BOOST_TEST(error_of([&] { data::read_csv(t.path / "ok.csv", {.label_column = "target"}); }).find("no column named 'target'") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(list_files_shard_interleave_and_resume) {
  temp_dir t;
  for (int f = 0; f < 4; ++f) {  // file f holds rows 10 f .. 10 f + 4
    std::string s = "v,label\n";
    for (int r = 0; r < 5; ++r) s += std::to_string(10 * f + r) + "," + std::to_string(10 * f + r) + "\n";
    write(t.path / ("part-" + std::to_string(f) + ".csv"), s);
  }
  auto names = data::list_files((t.path / "part-*.csv").string());
  BOOST_TEST(names.cardinality() == 4);
  BOOST_TEST(names.names()[2].ends_with("part-2.csv"));
  BOOST_TEST(error_of([&] { data::list_files((t.path / "*.parquet").string()); }).find("no file matches") != std::string::npos);
  auto open_csv = [](const std::string& f) { return data::csv_dataset(f); };
  // worker 1 of 2 under FILE sharding reads files 1 and 3, two at a time, blocks of 2
  auto ds = names | data::shard(2, 1) | data::interleave(open_csv, 2, 2);
  std::vector<float> got;
  auto it = ds.iterate(0);
  while (auto e = it.next()) got.push_back(e->second());
  BOOST_TEST(got == (std::vector<float>{10, 11, 30, 31, 12, 13, 32, 33, 14, 34}), boost::test_tools::per_element());
  // resumable like every pipeline
  auto full = names | data::interleave(open_csv, 3, 1) | data::batch(3);
  auto a = data::make_iterator(full);
  for (int i = 0; i < 2; ++i) a.next();
  auto b = data::make_iterator(full);
  b.restore(a.save());
  BOOST_TEST(a.next()->second == b.next()->second);
  auto shuffled = data::list_files((t.path / "part-*.csv").string(), true, 5);
  BOOST_TEST(shuffled.cardinality() == 4);
}

BOOST_AUTO_TEST_SUITE_END()
