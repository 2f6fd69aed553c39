// File sources: .npy/.npz (against numpy when Debian's python3-numpy is there) and the zip archives under
// them, CSV, list_files and interleave (in TF's order, sharded by file, resumed exactly), with corrupt
// inputs named in errors.
#include "support/gradcheck.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>

#include <dtrain/core/zip.hpp>

#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::have_numpy;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;

namespace {

/// Runs a Python script (written to a file, so no shell quoting) with Debian's python3; its exit status.
int python(const fs::path& dir, const std::string& code) {
  const fs::path script = dir / "script.py";
  std::ofstream(script) << "import sys\nimport numpy as np\nd = sys.argv[1]\n" << code << "\n";
  return std::system(("/usr/bin/python3 '" + script.string() + "' '" + dir.string() + "'").c_str());
}
void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
std::vector<float> values(const tensor& t) { return std::vector<float>(t.begin(), t.end()); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
/// A hand-made .npy image: header dict `h` (padded like numpy's), then `data`.
std::string npy(const std::string& h, const std::string& data, char version = 1) {
  std::string out("\x93NUMPY", 6);
  out += version, out += '\0';
  std::string header = h + "\n";
  if (version == 1)
    out += char(header.size() & 0xff), out += char(header.size() >> 8);
  else
    out += char(header.size() & 0xff), out += char(header.size() >> 8), out += '\0', out += '\0';
  return out + header + data;
}
std::string f32(std::initializer_list<float> v) {
  std::string s;
  for (float x : v) s.append(reinterpret_cast<const char*>(&x), 4);
  return s;
}
/// Every label a dataset of examples yields in pass `pass`, in order.
template <class D>
std::vector<float> labels(const D& d, std::uint64_t pass = 0) {
  std::vector<float> out;
  auto it = d.iterate(pass);
  while (auto e = it.next())
    for (float v : e->second) out.push_back(v);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(files)

// ---- .npy / .npz ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(npy_and_npz_round_trip) {
  temp_dir t;
  const tensor a = from_span(std::vector<float>{1, -2, 3.5f, 4, 5, 6}, {2, 3});
  const tensor v = from_span(std::vector<float>{7, 8}, {2});
  const tensor s = from_span(std::vector<float>{-0.25f}, {});
  const tensor empty = zeros({0, 3});
  const tensor cube = from_span(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  for (const auto& [name, x] : std::vector<std::pair<std::string, tensor>>{
           {"a", a}, {"v", v}, {"s", s}, {"empty", empty}, {"cube", cube}}) {
    data::write_npy(t.path / (name + ".npy"), x);
    const tensor back = data::read_npy(t.path / (name + ".npy"));
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(extents_of(back) == extents_of(x), boost::test_tools::per_element());
      BOOST_TEST(values(back) == values(x), boost::test_tools::per_element());
    }
  }
  // data starts 64-byte aligned, as numpy writes it
  BOOST_TEST((read(t.path / "a.npy").size() - 6 * 4) % 64 == 0u);
  data::write_npz(t.path / "all.npz", {{"x", a}, {"y", v}, {"s", s}, {"empty", empty}, {"cube", cube}});
  const auto m = data::read_npz(t.path / "all.npz");
  BOOST_TEST(m.size() == 5u);
  BOOST_TEST(m.at("x") == a);
  BOOST_TEST(m.at("y") == v);
  BOOST_TEST(m.at("cube") == cube);
  BOOST_TEST(m.at("s").dimension() == 0u);
  BOOST_TEST(m.at("s")() == -0.25f);
  BOOST_TEST((extents_of(m.at("empty")) == extents{0, 3}));
  // overwriting replaces the file and leaves no temporary behind
  data::write_npz(t.path / "all.npz", {{"x", a}, {"y", v}});
  BOOST_TEST(data::read_npz(t.path / "all.npz").size() == 2u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(t.path)) names.insert(e.path().filename().string());
  BOOST_TEST(names == (std::set<std::string>{"a.npy", "v.npy", "s.npy", "empty.npy", "cube.npy", "all.npz"}),
             boost::test_tools::per_element());
  BOOST_CHECK_THROW(data::write_npz(t.path / "bad.npz", {{"", a}}), value_error);
  BOOST_CHECK_THROW(data::write_npy(t.path / "no" / "such" / "folder.npy", a), io_error);
}

BOOST_AUTO_TEST_CASE(npy_and_npz_datasets) {
  temp_dir t;
  const tensor x = from_span(std::vector<float>{0, 1, 10, 11, 20, 21}, {3, 2});
  const tensor y = from_span(std::vector<float>{0, 1, 2}, {3});
  data::write_npy(t.path / "x.npy", x);
  data::write_npy(t.path / "y.npy", y);
  data::write_npz(t.path / "xy.npz", {{"x", x}, {"y", y}, {"images", x}, {"labels", y}});
  auto a = data::from_npy(t.path / "x.npy", t.path / "y.npy");
  auto b = data::from_npz(t.path / "xy.npz");
  auto c = data::from_npz(t.path / "xy.npz", "images", "labels");
  static_assert(data::dataset<decltype(a)>);
  BOOST_TEST(a.cardinality() == 3);
  for (auto* d : {&a, &b, &c}) {
    auto it = d->iterate(0);
    it.skip(1);
    const auto e = it.next();
    BOOST_TEST((extents_of(e->first) == extents{2}));
    BOOST_TEST(values(e->first) == (std::vector<float>{10, 11}), boost::test_tools::per_element());
    BOOST_TEST(e->second() == 1.0f);
  }
  // a missing entry is named, with what the archive holds
  const std::string e = error_of([&] { data::from_npz(t.path / "xy.npz", "features", "labels"); });
  BOOST_TEST(contains(e, "xy.npz: no array named 'features' in the archive (it holds: images, labels, x, y)"), e);
  // features and labels of different lengths
  data::write_npy(t.path / "y2.npy", zeros({2}));
  BOOST_CHECK_THROW(data::from_npy(t.path / "x.npy", t.path / "y2.npy"), shape_error);
}

BOOST_AUTO_TEST_CASE(numpy_files_read_and_ours_read_by_numpy) {
  if (!have_numpy()) {
    BOOST_TEST_MESSAGE("numpy not installed (Debian: python3-numpy): numpy interop checks skipped");
    return;
  }
  temp_dir t;
  BOOST_REQUIRE(python(t.path, R"(
v = [0, 1, 2, 3, 4, 5]
for dt in ['f4', 'f8', 'i1', 'u1', 'i2', 'u2', 'i4', 'u4', 'i8', 'u8']:
    np.save(d + '/' + dt + '.npy', np.array(v, dt).reshape(2, 3))
np.save(d + '/neg.npy', np.array([-128, -1, 127], np.int8))
np.save(d + '/neg8.npy', np.array([-(2**40), -3, 2**40], np.int64))
np.save(d + '/u8max.npy', np.array([255, 0], np.uint8))
np.save(d + '/b.npy', np.array([True, False, True]))
np.save(d + '/d.npy', np.array([0.25, 1e10, -1.5e-3]))
np.save(d + '/scalar.npy', np.float32(2.5))
np.save(d + '/f.npy', np.asfortranarray(np.ones((2, 3), np.float32)))
np.save(d + '/be.npy', np.array([1, 2], '>f4'))
for ver in [(2, 0), (3, 0)]:
    with open(d + '/v%d.npy' % ver[0], 'wb') as f:
        np.lib.format.write_array(f, np.arange(6, dtype=np.float32).reshape(3, 2), version=ver)
np.savez(d + '/plain.npz', x=np.arange(12, dtype=np.float32).reshape(3, 4), y=np.arange(3))
np.savez_compressed(d + '/packed.npz', x=np.arange(12, dtype=np.float64).reshape(3, 4), y=np.array([7, 8, 9], np.uint8))
)") == 0);
  for (const std::string dt : {"f4", "f8", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"}) {
    const tensor a = data::read_npy(t.path / (dt + ".npy"));
    BOOST_TEST_CONTEXT(dt) {
      BOOST_TEST((extents_of(a) == extents{2, 3}));
      BOOST_TEST(values(a) == (std::vector<float>{0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
    }
  }
  BOOST_TEST(values(data::read_npy(t.path / "neg.npy")) == (std::vector<float>{-128, -1, 127}),
             boost::test_tools::per_element());
  BOOST_TEST(values(data::read_npy(t.path / "neg8.npy")) == (std::vector<float>{-0x1p40f, -3, 0x1p40f}),
             boost::test_tools::per_element());
  BOOST_TEST(values(data::read_npy(t.path / "u8max.npy")) == (std::vector<float>{255, 0}), boost::test_tools::per_element());
  BOOST_TEST(values(data::read_npy(t.path / "b.npy")) == (std::vector<float>{1, 0, 1}), boost::test_tools::per_element());
  BOOST_TEST(values(data::read_npy(t.path / "d.npy")) == (std::vector<float>{0.25f, 1e10f, -1.5e-3f}),
             boost::test_tools::per_element());
  const tensor scalar = data::read_npy(t.path / "scalar.npy");
  BOOST_TEST(scalar.dimension() == 0u);
  BOOST_TEST(scalar() == 2.5f);
  for (const std::string v : {"v2", "v3"}) {
    const tensor a = data::read_npy(t.path / (v + ".npy"));
    BOOST_TEST((extents_of(a) == extents{3, 2}));
    BOOST_TEST(a(2, 1) == 5.0f);
  }
  const std::string fortran = error_of([&] { data::read_npy(t.path / "f.npy"); });
  BOOST_TEST(contains(fortran, "f.npy: Fortran-ordered arrays are not supported"), fortran);
  const std::string big = error_of([&] { data::read_npy(t.path / "be.npy"); });
  BOOST_TEST(contains(big, "be.npy: unsupported dtype '>f4' (big-endian"), big);
  for (const std::string z : {"plain", "packed"}) {
    const auto m = data::read_npz(t.path / (z + ".npz"));
    BOOST_TEST_CONTEXT(z) {
      BOOST_TEST(m.size() == 2u);
      BOOST_TEST((extents_of(m.at("x")) == extents{3, 4}));
      BOOST_TEST(m.at("x")(2, 3) == 11.0f);
      BOOST_TEST(m.at("x")(1, 0) == 4.0f);
    }
  }
  BOOST_TEST(values(data::read_npz(t.path / "plain.npz").at("y")) == (std::vector<float>{0, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(values(data::read_npz(t.path / "packed.npz").at("y")) == (std::vector<float>{7, 8, 9}),
             boost::test_tools::per_element());
  BOOST_TEST(data::from_npz(t.path / "packed.npz").cardinality() == 3);
  // a damaged deflate stream or its CRC is caught
  {
    std::string z = read(t.path / "packed.npz");
    z[60] = char(z[60] ^ 0x5a);
    write(t.path / "damaged.npz", z);
    const std::string e = error_of([&] { data::read_npz(t.path / "damaged.npz"); });
    BOOST_TEST((contains(e, "damaged.npz: ") && contains(e, "'x.npy'")), e);
  }

  // numpy reads what we write, values compared
  data::write_npz(t.path / "ours.npz", {{"w", from_span(std::vector<float>{1.5f, -2, 3, 4, 0.1f, 6}, {2, 3})},
                                        {"b", from_span(std::vector<float>{0.5f, -0.5f}, {2})},
                                        {"layers/dense/vars/0", from_span(std::vector<float>{3}, {})}});
  data::write_npy(t.path / "ours.npy", from_span(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
  BOOST_TEST(python(t.path, R"(
z = np.load(d + '/ours.npz')
assert sorted(z.files) == ['b', 'layers/dense/vars/0', 'w'], z.files
assert z['w'].dtype == np.float32 and z['w'].shape == (2, 3)
assert np.array_equal(z['w'], np.array([[1.5, -2, 3], [4, 0.1, 6]], np.float32))
assert np.array_equal(z['b'], np.array([0.5, -0.5], np.float32))
assert z['layers/dense/vars/0'].shape == () and z['layers/dense/vars/0'] == 3
a = np.load(d + '/ours.npy')
assert a.dtype == np.float32 and np.array_equal(a, np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2))
import zipfile
assert zipfile.ZipFile(d + '/ours.npz').testzip() is None
)") == 0);
}

BOOST_AUTO_TEST_CASE(corrupt_numpy_files_are_named) {
  temp_dir t;
  auto err = [&](const std::string& file, auto read) { return error_of([&] { read(t.path / file); }); };
  const auto npy_ = [](const fs::path& p) { data::read_npy(p); };
  const auto npz_ = [](const fs::path& p) { data::read_npz(p); };

  BOOST_TEST(contains(err("missing.npy", npy_), "missing.npy: cannot open"));
  write(t.path / "bad.npy", "not numpy at all");
  BOOST_TEST(contains(err("bad.npy", npy_), "bad.npy: bad .npy magic"));
  // truncated data: the message names the file and both sizes
  data::write_npy(t.path / "short.npy", zeros({10, 10}));
  fs::resize_file(t.path / "short.npy", fs::file_size(t.path / "short.npy") - 40);
  const std::string shorter = err("short.npy", npy_);
  BOOST_TEST(contains(shorter, "short.npy: truncated: shape (10, 10) of '<f4' needs 400 bytes of data, the file has 360"),
             shorter);
  write(t.path / "long.npy", read(t.path / "short.npy") + std::string(44, '\0'));
  BOOST_TEST(contains(err("long.npy", npy_), "long.npy: wrong data length"));
  // header defects
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  write(t.path / "ok.npy", npy(good, f32({1, 2})));
  BOOST_TEST(values(data::read_npy(t.path / "ok.npy")) == (std::vector<float>{1, 2}), boost::test_tools::per_element());
  write(t.path / "v2.npy", npy(good, f32({1, 2}), 2));
  BOOST_TEST(data::read_npy(t.path / "v2.npy")(1) == 2.0f);
  write(t.path / "v9.npy", npy(good, f32({1, 2}), 9));
  BOOST_TEST(contains(err("v9.npy", npy_), "v9.npy: unsupported .npy format version 9.0"));
  write(t.path / "fortran.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }", f32({1, 2})));
  BOOST_TEST(contains(err("fortran.npy", npy_), "fortran.npy: Fortran-ordered arrays are not supported"));
  write(t.path / "complex.npy", npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", f32({1, 2})));
  BOOST_TEST(contains(err("complex.npy", npy_), "complex.npy: unsupported dtype '<c8'"));
  write(t.path / "shape.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", f32({1, 2})));
  BOOST_TEST(contains(err("shape.npy", npy_), "shape.npy: malformed .npy header"));
  write(t.path / "nokey.npy", npy("{'descr': '<f4', 'shape': (2,), }", f32({1, 2})));
  BOOST_TEST(contains(err("nokey.npy", npy_), "nokey.npy: malformed .npy header (it needs"));
  write(t.path / "huge.npy",
        npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", f32({1, 2})));
  BOOST_TEST(contains(err("huge.npy", npy_), "huge.npy: the header's shape (4294967296, 4294967296, 16) is too large"));
  std::string cut = npy(good, f32({1, 2}));
  write(t.path / "cut.npy", cut.substr(0, 20));
  BOOST_TEST(contains(err("cut.npy", npy_), "cut.npy: truncated .npy header"));

  // .npz: a flipped payload byte is caught by the CRC
  data::write_npz(t.path / "z.npz", {{"x", from_span(std::vector<float>(100, 1.0f), {100})}});
  const std::string z = read(t.path / "z.npz");
  {
    std::string flipped = z;
    flipped[200] = char(flipped[200] ^ 0x42);
    write(t.path / "crc.npz", flipped);
  }
  BOOST_TEST(contains(err("crc.npz", npz_), "crc.npz: CRC mismatch in entry 'x.npy'"));
  write(t.path / "trunc.npz", z.substr(0, z.size() / 2));
  BOOST_TEST(contains(err("trunc.npz", npz_), "trunc.npz: not a zip archive"));
  write(t.path / "junk.npz", "PK\x03\x04 and then nothing");
  BOOST_TEST(contains(err("junk.npz", npz_), "junk.npz: not a zip archive"));
  {  // an end record claiming 0xffff entries is zip64's marker
    std::string z64 = z;
    z64[z64.size() - 22 + 8] = z64[z64.size() - 22 + 9] = z64[z64.size() - 22 + 10] = z64[z64.size() - 22 + 11] = '\xff';
    write(t.path / "z64.npz", z64);
  }
  BOOST_TEST(contains(err("z64.npz", npz_), "z64.npz: zip64 archives are not supported"));
  {  // the central directory offset pointing past the end
    std::string far = z;
    far[far.size() - 22 + 19] = '\x7f';
    write(t.path / "far.npz", far);
  }
  BOOST_TEST(contains(err("far.npz", npz_), "far.npz: corrupt zip"));
  // a hostile archive: sizes it cannot hold are refused before anything is allocated: a stored entry
  // whose sizes disagree, a deflated entry claiming ~4 GiB from a few bytes
  std::size_t cd = 0;  // the central directory entry of "x.npy", where the end record says
  for (int i = 3; i >= 0; --i) cd = cd << 8 | static_cast<unsigned char>(z[z.size() - 22 + 16 + std::size_t(i)]);
  {
    std::string lying = z;
    lying[cd + 24 + 3] = '\x7f';  // uncompressed size ~2 GiB
    write(t.path / "stored.npz", lying);
  }
  BOOST_TEST(contains(err("stored.npz", npz_), "stored.npz: corrupt stored entry 'x.npy'"));
  {
    std::string deflated = z;
    deflated[cd + 10] = 8;  // method deflate
    deflated[cd + 24 + 3] = '\xff', deflated[cd + 24 + 2] = '\xff';
    write(t.path / "bomb.npz", deflated);
  }
  BOOST_TEST(contains(err("bomb.npz", npz_), "bytes cannot inflate to the"));
}

BOOST_AUTO_TEST_CASE(zip_archives_hold_their_entries_and_refuse_what_exceeds_a_cap) {
  const std::string big(100, 'b');
  const std::string zip = dtrain::detail::zip_archive({{"a.txt", "alpha"}, {"dir/b.bin", big}, {"é.txt", ""}}, "t.zip");
  const dtrain::detail::zip_view z(std::span<const char>(zip.data(), zip.size()), "t.zip");
  BOOST_TEST(z.entries().size() == 3u);
  BOOST_TEST(z.read(*z.find("a.txt")) == "alpha");
  BOOST_TEST(z.read(*z.find("é.txt")).empty());
  BOOST_TEST(z.find("c.txt") == nullptr);
  BOOST_TEST(z.read(*z.find("dir/b.bin"), 100) == big);
  BOOST_TEST(contains(error_of([&] { z.read(*z.find("dir/b.bin"), 99); }), "t.zip: entry 'dir/b.bin' claims 100 bytes, over the 99"));
  const std::string twice = dtrain::detail::zip_archive({{"a", "1"}, {"a", "2"}}, "twice.zip");
  BOOST_TEST(contains(error_of([&] { dtrain::detail::zip_view(std::span<const char>(twice.data(), twice.size()), "twice.zip"); }),
                      "twice.zip: the archive holds 'a' twice"));
  BOOST_TEST(contains(error_of([&] { dtrain::detail::zip_archive({{"", "x"}}, "empty.zip"); }), "non-empty name"));
}

// ---- CSV -----------------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(csv_files) {
  temp_dir t;
  write(t.path / "ok.csv", "a, \"b\",label\r\n1,2,0\r\n\r\n3, 4.5 ,1\n\"5\",-6e1,+2\n");
  auto [x, y] = data::read_csv(t.path / "ok.csv", {.label_column = "label"});
  BOOST_TEST((extents_of(x) == extents{3, 2}));
  BOOST_TEST(values(x) == (std::vector<float>{1, 2, 3, 4.5f, 5, -60}), boost::test_tools::per_element());
  BOOST_TEST(values(y) == (std::vector<float>{0, 1, 2}), boost::test_tools::per_element());
  // the label by index (first column) or by default (the last one)
  auto first = data::read_csv(t.path / "ok.csv", {.label_column = 0});
  BOOST_TEST(values(first.second) == (std::vector<float>{1, 3, 5}), boost::test_tools::per_element());
  BOOST_TEST(values(first.first) == (std::vector<float>{2, 0, 4.5f, 1, -60, 2}), boost::test_tools::per_element());
  BOOST_TEST(data::read_csv(t.path / "ok.csv").second == y);
  // a dataset of rows: features (num_features,), label ()
  auto ds = data::csv_dataset(t.path / "ok.csv", {.label_column = "b"});
  BOOST_TEST(ds.cardinality() == 3);
  auto it = ds.iterate(0);
  it.skip(1);
  const auto e = it.next();
  BOOST_TEST((extents_of(e->first) == extents{2}));
  BOOST_TEST(values(e->first) == (std::vector<float>{3, 1}), boost::test_tools::per_element());
  BOOST_TEST(e->second.dimension() == 0u);
  BOOST_TEST(e->second() == 4.5f);
  // no header, another delimiter
  write(t.path / "semi.csv", "1;2;3\n4;5;6\n");
  auto semi = data::read_csv(t.path / "semi.csv", {.label_column = 1, .header = false, .delimiter = ';'});
  BOOST_TEST(values(semi.first) == (std::vector<float>{1, 3, 4, 6}), boost::test_tools::per_element());
  BOOST_TEST(values(semi.second) == (std::vector<float>{2, 5}), boost::test_tools::per_element());

  // errors name the file, the line and the column
  write(t.path / "fields.csv", "a,b,label\n1,2,0\n\n3,4\n");
  const std::string fields = error_of([&] { data::read_csv(t.path / "fields.csv"); });
  BOOST_TEST(contains(fields, "fields.csv:4: 2 fields, expected 3"), fields);
  write(t.path / "text.csv", "a,b,label\n1,2,0\n1,x,0\n");
  const std::string text = error_of([&] { data::read_csv(t.path / "text.csv"); });
  BOOST_TEST(contains(text, "text.csv:3: column 'b' holds \"x\", not a number"), text);
  write(t.path / "noheader.csv", "1,2\n3,\n");
  const std::string empty = error_of([&] { data::read_csv(t.path / "noheader.csv", {.header = false}); });
  BOOST_TEST(contains(empty, "noheader.csv:2: column 1 holds \"\", not a number"), empty);
  const std::string unknown = error_of([&] { data::read_csv(t.path / "ok.csv", {.label_column = "target"}); });
  BOOST_TEST(contains(unknown, "ok.csv: no column named 'target' in the header (columns: 'a', 'b', 'label')"), unknown);
  BOOST_TEST(contains(error_of([&] { data::read_csv(t.path / "ok.csv", {.label_column = 3}); }), "out of range"));
  BOOST_TEST(contains(error_of([&] { data::csv_dataset(t.path / "missing.csv"); }), "missing.csv: cannot open"));
  write(t.path / "quote.csv", "a,label\n\"1,2\n");
  BOOST_TEST(contains(error_of([&] { data::read_csv(t.path / "quote.csv"); }), "quote.csv:2: unterminated quoted field"));
  write(t.path / "header_only.csv", "a,label\n");
  BOOST_TEST(contains(error_of([&] { data::read_csv(t.path / "header_only.csv"); }), "header_only.csv: no data rows"));
}

// ---- list_files and interleave -----------------------------------------------------------------------------------

namespace {
/// part-f.csv holds rows (10 f + r, label 10 f + r) for r < rows[f].
void write_parts(const fs::path& dir, const std::vector<int>& rows) {
  for (int f = int(rows.size()) - 1; f >= 0; --f) {  // created out of order on purpose
    std::string s = "v,label\n";
    for (int r = 0; r < rows[std::size_t(f)]; ++r) s += std::to_string(10 * f + r) + "," + std::to_string(10 * f + r) + "\n";
    write(dir / ("part-" + std::to_string(f) + ".csv"), s);
  }
}
const auto open_csv = [](const std::string& f) { return data::csv_dataset(f); };
}  // namespace

BOOST_AUTO_TEST_CASE(list_files_sorted_shuffled_and_unmatched) {
  temp_dir t;
  write_parts(t.path, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  write(t.path / "other.txt", "");
  auto names = data::list_files((t.path / "part-*.csv").string());
  static_assert(std::is_same_v<decltype(names)::element_type, std::string>);
  BOOST_TEST(names.cardinality() == 12);
  std::vector<std::string> got;
  for (auto it = names.iterate(0); auto n = it.next();) got.push_back(fs::path(*n).filename().string());
  std::vector<std::string> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  BOOST_TEST(got == sorted, boost::test_tools::per_element());  // byte order: part-1, part-10, part-11, part-2, ...
  BOOST_TEST(got[1] == "part-1.csv");
  BOOST_TEST(got[2] == "part-10.csv");
  auto again = [&](const data::file_list& l, std::uint64_t pass) {
    std::vector<std::string> out;
    for (auto it = l.iterate(pass); auto n = it.next();) out.push_back(*n);
    return out;
  };
  // shuffled: a permutation, the same for the same seed and pass, another in the next pass
  auto shuffled = data::list_files((t.path / "part-*.csv").string(), true, 5);
  const auto p0 = again(shuffled, 0), p1 = again(shuffled, 1);
  BOOST_TEST(p0 == again(data::list_files((t.path / "part-*.csv").string(), true, 5), 0), boost::test_tools::per_element());
  BOOST_TEST((std::set<std::string>(p0.begin(), p0.end()) ==
              std::set<std::string>(names.names().begin(), names.names().end())));
  BOOST_TEST((p0 != p1));
  BOOST_TEST((p0 != names.names()));
  const std::string e = error_of([&] { data::list_files((t.path / "*.parquet").string()); });
  BOOST_TEST(contains(e, "list_files: no file matches the pattern \"" + (t.path / "*.parquet").string() + "\""), e);
}

BOOST_AUTO_TEST_CASE(interleave_follows_tf_order) {
  // tf.data's documented example: range(1, 6).interleave(lambda x: from_tensors(x).repeat(6), 2, 4)
  auto ds = data::from_tensor_slices(from_span(std::vector<float>{1, 2, 3, 4, 5}, {5})) |
            data::interleave([](const tensor& x) { return data::from_tensors(x) | data::repeat(6); }, 2, 4);
  std::vector<float> got;
  for (auto it = ds.iterate(0); auto e = it.next();) got.push_back((*e)());
  const std::vector<float> tf{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  BOOST_TEST(got == tf, boost::test_tools::per_element());
  BOOST_TEST(ds.cardinality() == data::unknown);
  BOOST_CHECK_THROW(data::interleave(open_csv, 0), value_error);
  BOOST_CHECK_THROW(data::interleave(open_csv, 2, 0), value_error);
}

BOOST_AUTO_TEST_CASE(file_sharding_gives_a_sharded_copy_and_leaves_the_pipeline_as_it_is) {
  temp_dir t;
  write_parts(t.path, {3, 2, 1, 4, 2});
  // a lambda stage makes the pipeline impossible to assign: the sharded pipeline is built anew
  auto ds = data::list_files((t.path / "part-*.csv").string()) | data::interleave(open_csv, 2, 1) |
            data::map([](data::example e) { return e; }) | data::batch(4);
  static_assert(data::file_shardable<decltype(ds)>);
  static_assert(!data::file_shardable<decltype(data::from_tensor_slices(zeros({4, 2})) | data::batch(2))>);
  const auto all = labels(ds);
  auto [w1, found] = data::sharded_by_files(ds, 2, 1);
  BOOST_TEST(found.files == 5u);
  BOOST_TEST(found.global_batch.value_or(0) == 4u);
  // worker 1 of 2: parts 1 and 3, in batches of 4 / 2
  BOOST_TEST(labels(w1) == (std::vector<float>{10, 30, 11, 31, 32, 33}), boost::test_tools::per_element());
  BOOST_TEST(w1.iterate(0).next()->second.shape()[0] == 2u);
  BOOST_TEST(labels(ds) == all, boost::test_tools::per_element());  // the original is untouched
  BOOST_TEST(ds.iterate(0).next()->second.shape()[0] == 4u);
  // the outermost batch is the one divided; one that does not divide is noted and left for the caller
  auto [w0, odd] = data::sharded_by_files(ds | data::batch(3), 2, 0);
  BOOST_TEST(odd.global_batch.value_or(0) == 3u);
  BOOST_TEST(w0.size == 3u);
  BOOST_TEST(w0.up.size == 4u);  // an inner batch is left as it is
}

BOOST_AUTO_TEST_CASE(list_files_shard_interleave_and_resume) {
  temp_dir t;
  write_parts(t.path, {3, 2, 1, 4, 2});  // part-0: 0 1 2, part-1: 10 11, part-2: 20, part-3: 30..33, part-4: 40 41
  auto names = data::list_files((t.path / "part-*.csv").string());
  // FILE sharding: worker 0 of 2 reads parts 0, 2, 4. A file that ends frees its slot and the turn moves on;
  // the freed slot opens the next file when the cycle comes back to it (TF's order).
  auto w0 = names | data::shard(2, 0) | data::interleave(open_csv, 2, 1);
  BOOST_TEST(labels(w0) == (std::vector<float>{0, 20, 1, 2, 40, 41}), boost::test_tools::per_element());
  auto w1 = names | data::shard(2, 1) | data::interleave(open_csv, 2, 2);  // parts 1 and 3, blocks of 2
  BOOST_TEST(labels(w1) == (std::vector<float>{10, 11, 30, 31, 32, 33}), boost::test_tools::per_element());
  auto one = names | data::interleave(open_csv, 1, 3);  // cycle 1: the files one after the other
  BOOST_TEST(labels(one) == (std::vector<float>{0, 1, 2, 10, 11, 20, 30, 31, 32, 33, 40, 41}), boost::test_tools::per_element());
  auto wide = names | data::interleave(open_csv, 8, 1);  // more slots than files
  BOOST_TEST(labels(wide) == (std::vector<float>{0, 10, 20, 30, 40, 1, 11, 31, 41, 2, 32, 33}),
             boost::test_tools::per_element());
  {
    auto it = w0.iterate(0);
    const auto e = it.next();
    BOOST_TEST((extents_of(e->first) == extents{1}));
    BOOST_TEST(e->second.dimension() == 0u);
  }
  // skip(n) lands where n calls of next() would, for every n
  auto check_skip = [](const auto* d) {
    const auto all = labels(*d);
    for (std::int64_t n = 0; n <= std::int64_t(all.size()) + 1; ++n) {
      auto it = d->iterate(0);
      BOOST_TEST(it.skip(n) == std::min<std::int64_t>(n, std::int64_t(all.size())));
      std::vector<float> rest;
      while (auto e = it.next()) rest.push_back(e->second());
      BOOST_TEST_CONTEXT("skip " << n) {
        BOOST_TEST(rest == std::vector<float>(all.begin() + std::min<std::ptrdiff_t>(n, std::ptrdiff_t(all.size())), all.end()),
                   boost::test_tools::per_element());
      }
    }
  };
  check_skip(&w0);
  check_skip(&w1);
  check_skip(&wide);

  // exact resume through data::iterator, over passes with a reshuffled file list
  auto ds = data::list_files((t.path / "part-*.csv").string(), true, 11) | data::shard(2, 0) |
            data::interleave(open_csv, 2, 2) | data::repeat() | data::batch(3);
  for (std::int64_t cut : {0, 1, 2, 3, 5, 8, 13}) {
    auto straight = data::make_iterator(ds, 3);
    std::vector<std::vector<float>> expect;
    for (std::int64_t i = 0; i < cut + 6; ++i) expect.push_back(values(straight.next()->second));
    auto first = data::make_iterator(ds, 3);
    for (std::int64_t i = 0; i < cut; ++i) first.next();
    const nlohmann::json saved = first.save();
    auto resumed = data::make_iterator(ds);
    resumed.restore(nlohmann::json::parse(saved.dump()));
    for (std::int64_t i = cut; i < cut + 6; ++i) {
      const auto e = resumed.next();
      BOOST_TEST_CONTEXT("cut " << cut << " element " << i) {
        BOOST_TEST(values(e->second) == expect[std::size_t(i)], boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
