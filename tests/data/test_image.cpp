// Images: PNG, JPEG and GIF files written here with libpng, libjpeg and giflib, and BMP files laid out
// byte by byte, decode to their pixels (JPEG within its loss, the others exactly), in every channel layout; bilinear and nearest resizing against TF's half-pixel
// formula worked by hand; image_dataset_from_directory's classes, labels, split and errors; corrupt,
// truncated and oversized files named in errors.
#include "support/gradcheck.hpp"

#if __has_include(<png.h>) && __has_include(<jpeglib.h>) && __has_include(<gif_lib.h>)
#include <zlib.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <dtrain/data/image.hpp>

#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;

namespace {
using bytes = std::vector<unsigned char>;

/// `px` (h x w x channels of 1, 2, 3 or 4) as a PNG, written by libpng's simplified API.
bytes png_of(const bytes& px, std::size_t w, std::size_t h, std::size_t channels) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = png_uint_32(w), img.height = png_uint_32(h);
  img.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 2 ? PNG_FORMAT_GA : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  png_alloc_size_t size = 0;
  BOOST_REQUIRE(png_image_write_to_memory(&img, nullptr, &size, 0, px.data(), 0, nullptr));
  bytes out(size);
  BOOST_REQUIRE(png_image_write_to_memory(&img, out.data(), &size, 0, px.data(), 0, nullptr));
  out.resize(size);
  return out;
}
/// `px` (h x w x 3) as an interlaced (Adam7) RGB PNG, written by libpng's full API.
bytes interlaced_png_of(const bytes& px, std::size_t w, std::size_t h) {
  bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, [](png_structp p, png_bytep data, png_size_t n) {
    auto* o = static_cast<bytes*>(png_get_io_ptr(p));
    o->insert(o->end(), data, data + n);
  }, nullptr);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_ADAM7,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_bytep> rows(h);
  for (std::size_t y = 0; y < h; ++y) rows[y] = const_cast<unsigned char*>(px.data()) + y * w * 3;
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}
/// `px` (h x w x 1 or 3) as a baseline JPEG of this quality, written by libjpeg.
bytes jpeg_of(const bytes& px, std::size_t w, std::size_t h, int channels, int quality = 95) {
  jpeg_compress_struct c{};
  jpeg_error_mgr e{};
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = JDIMENSION(w), c.image_height = JDIMENSION(h), c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<unsigned char*>(px.data()) + std::size_t(c.next_scanline) * w * std::size_t(channels);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  bytes out(buffer, buffer + size);
  std::free(buffer);
  jpeg_destroy_compress(&c);
  return out;
}
bytes random_pixels(std::size_t n, std::uint64_t seed) {
  rng r(seed);
  bytes px(n);
  for (auto& p : px) p = static_cast<unsigned char>(r.below(256));
  return px;
}
std::vector<float> floats(const bytes& b) { return std::vector<float>(b.begin(), b.end()); }
std::vector<float> values(const tensor& t) { return std::vector<float>(t.begin(), t.end()); }
void write(const fs::path& p, const bytes& b) { std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size())); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
void put32(bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + std::size_t(i)] = static_cast<unsigned char>(v >> (8 * i));
}
/// A BMP of `w` x `h` pixels, `bpp` bits each, laid out by hand: the file and info headers (`header`
/// bytes: 40, or 56 with an alpha mask), `extra` after it (bit masks or a palette), then the rows as
/// `row(y, out)` writes them (y counted in file order), each padded to 4 bytes.
template <class Row>
bytes bmp_of(std::size_t w, std::int32_t h, unsigned bpp, std::uint32_t compression, const bytes& extra, Row row,
             std::uint32_t header = 40) {
  const std::size_t stride = (w * bpp + 31) / 32 * 4, rows = std::size_t(h < 0 ? -h : h);
  const std::size_t offset = 14 + header + extra.size();
  bytes b(offset + stride * rows, 0);
  b[0] = 'B', b[1] = 'M';
  put32(b, 2, std::uint32_t(b.size()));
  put32(b, 10, std::uint32_t(offset));
  put32(b, 14, header);
  put32(b, 18, std::uint32_t(w));
  put32(b, 22, std::uint32_t(h));
  b[26] = 1, b[28] = static_cast<unsigned char>(bpp);
  put32(b, 30, compression);
  std::copy(extra.begin(), extra.end(), b.begin() + 14 + long(header));
  for (std::size_t y = 0; y < rows; ++y) row(y, b.data() + offset + y * stride);
  return b;
}
/// A GIF written by giflib: a `w` x `h` screen with a 4-colour table, then a first frame of `fw` x `fh`
/// at (`left`, `top`) holding `index(x, y)`, interlaced or not, with colour `transparent` transparent (or
/// -1), then a second frame that a first-frame decode must not show.
template <class Index>
bytes gif_of(int w, int h, int left, int top, int fw, int fh, bool interlace, int transparent, Index index) {
  bytes out;
  int error = 0;
  GifFileType* g = EGifOpen(&out, [](GifFileType* f, const GifByteType* data, int n) {
    auto* o = static_cast<bytes*>(f->UserData);
    o->insert(o->end(), data, data + n);
    return n;
  }, &error);
  BOOST_REQUIRE(g);
  const GifColorType colours[4] = {{10, 20, 30}, {200, 100, 50}, {0, 255, 0}, {255, 255, 255}};
  ColorMapObject* map = GifMakeMapObject(4, colours);
  EGifSetGifVersion(g, true);
  BOOST_REQUIRE(EGifPutScreenDesc(g, w, h, 8, 0, map) == GIF_OK);
  GraphicsControlBlock gcb{DISPOSAL_UNSPECIFIED, false, 0, transparent < 0 ? NO_TRANSPARENT_COLOR : transparent};
  GifByteType ext[4];
  BOOST_REQUIRE(EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, int(EGifGCBToExtension(&gcb, ext)), ext) == GIF_OK);
  BOOST_REQUIRE(EGifPutImageDesc(g, left, top, fw, fh, interlace, nullptr) == GIF_OK);
  std::vector<int> order;  // the rows in the order the file stores them
  if (interlace) {
    for (auto [start, step] : {std::pair{0, 8}, {4, 8}, {2, 4}, {1, 2}})
      for (int y = start; y < fh; y += step) order.push_back(y);
  } else {
    for (int y = 0; y < fh; ++y) order.push_back(y);
  }
  std::vector<GifPixelType> line(static_cast<std::size_t>(fw));
  for (int y : order) {
    for (int x = 0; x < fw; ++x) line[std::size_t(x)] = GifPixelType(index(x, y));
    BOOST_REQUIRE(EGifPutLine(g, line.data(), fw) == GIF_OK);
  }
  BOOST_REQUIRE(EGifPutImageDesc(g, 0, 0, w, h, false, nullptr) == GIF_OK);  // a second frame, all colour 3
  std::vector<GifPixelType> white(std::size_t(w), 3);
  for (int y = 0; y < h; ++y) BOOST_REQUIRE(EGifPutLine(g, white.data(), w) == GIF_OK);
  BOOST_REQUIRE(EGifCloseFile(g, &error) == GIF_OK);
  GifFreeMapObject(map);
  return out;
}
/// Every (first pixel value, label) an image dataset yields in a pass.
template <class D>
std::vector<std::pair<float, float>> pixels_and_labels(const D& d) {
  std::vector<std::pair<float, float>> out;
  auto it = d.iterate(0);
  while (auto b = it.next()) {
    const std::size_t n = b->first.shape()[0], per = b->first.size() / n, l = b->second.size() / n;
    for (std::size_t i = 0; i < n; ++i) out.push_back({b->first.data()[i * per], b->second.data()[i * l + l - 1]});
  }
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(image)

BOOST_AUTO_TEST_CASE(png_decodes_its_pixels_in_every_layout) {
  const std::size_t w = 7, h = 5;
  const bytes rgb = random_pixels(w * h * 3, 1);
  const tensor t = data::decode_png(png_of(rgb, w, h, 3));
  BOOST_TEST((t.shape() == tensor::shape_type{h, w, 3}));
  BOOST_TEST(values(t) == floats(rgb), boost::test_tools::per_element());
  // RGB -> RGBA: an opaque alpha; RGBA -> RGB: the alpha dropped
  const tensor rgba = data::decode_png(png_of(rgb, w, h, 3), 4);
  for (std::size_t i = 0; i < w * h; ++i) {
    BOOST_TEST(rgba.data()[4 * i + 3] == 255.0f);
    for (std::size_t k = 0; k < 3; ++k) BOOST_TEST(rgba.data()[4 * i + k] == float(rgb[3 * i + k]));
  }
  const bytes with_alpha = random_pixels(w * h * 4, 2);
  const tensor stripped = data::decode_png(png_of(with_alpha, w, h, 4), 3);
  for (std::size_t i = 0; i < w * h; ++i)
    for (std::size_t k = 0; k < 3; ++k) BOOST_TEST(stripped.data()[3 * i + k] == float(with_alpha[4 * i + k]));
  // gray: its own one channel, or three equal ones; gray and alpha keeps both
  const bytes gray = random_pixels(w * h, 3);
  BOOST_TEST(values(data::decode_png(png_of(gray, w, h, 1))) == floats(gray), boost::test_tools::per_element());
  const tensor grey_rgb = data::decode_png(png_of(gray, w, h, 1), 3);
  for (std::size_t i = 0; i < w * h; ++i)
    for (std::size_t k = 0; k < 3; ++k) BOOST_TEST(grey_rgb.data()[3 * i + k] == float(gray[i]));
  const bytes ga = random_pixels(w * h * 2, 4);
  BOOST_TEST(values(data::decode_png(png_of(ga, w, h, 2))) == floats(ga), boost::test_tools::per_element());
  // RGB -> gray: a gray RGB image (r = g = b) stays its value
  bytes tripled;
  for (auto v : gray) tripled.insert(tripled.end(), {v, v, v});
  BOOST_TEST(values(data::decode_png(png_of(tripled, w, h, 3), 1)) == floats(gray), boost::test_tools::per_element());
  // interlaced (Adam7): every pass lands in its rows
  const bytes big = random_pixels(19 * 11 * 3, 7);
  BOOST_TEST(values(data::decode_png(interlaced_png_of(big, 19, 11))) == floats(big), boost::test_tools::per_element());
  // decode_image knows it by its signature
  BOOST_TEST(values(data::decode_image(png_of(rgb, w, h, 3))) == floats(rgb), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_png_files_are_named_errors) {
  const std::size_t w = 16, h = 16;
  const bytes good = png_of(random_pixels(w * h * 3, 5), w, h, 3);
  BOOST_TEST(contains(error_of([&] { data::decode_png(bytes(good.begin(), good.begin() + long(good.size() / 2))); }), "truncated"));
  bytes corrupt = good;
  corrupt[good.size() / 2] ^= 0x40;  // inside IDAT: its CRC no longer holds
  BOOST_TEST(contains(error_of([&] { data::decode_png(corrupt); }), "decode_png: "));
  BOOST_TEST(contains(error_of([&] { data::decode_png(bytes{'G', 'I', 'F', '8', '9', 'a', 0, 0, 0}); }), "not a PNG"));
  BOOST_TEST(contains(error_of([&] { data::decode_png(good, 5); }), "channels 5 is not one of 0, 1, 2, 3, 4"));
  // a header (with a valid CRC) claiming 20000 x 20000 pixels: over the cap before any pixel is read
  bytes huge = good;
  for (int at : {16, 20}) huge[std::size_t(at)] = 0, huge[std::size_t(at) + 1] = 0, huge[std::size_t(at) + 2] = 0x4e, huge[std::size_t(at) + 3] = 0x20;
  const uLong crc = crc32(0, huge.data() + 12, 17);
  for (int i = 0; i < 4; ++i) huge[29 + std::size_t(i)] = static_cast<unsigned char>(crc >> (24 - 8 * i));
  BOOST_TEST(contains(error_of([&] { data::decode_png(huge); }), "over the cap"));
  // the cap can be set: 16 x 16 x 3 values fit in 768 bytes, not in 767
  data::max_image_bytes = 768;
  BOOST_TEST(data::decode_png(good).size() == 768u);
  data::max_image_bytes = 767;
  BOOST_TEST(contains(error_of([&] { data::decode_png(good); }), "over the cap of 767 bytes (max_image_bytes)"));
  data::max_image_bytes = std::size_t(1) << 28;
}

BOOST_AUTO_TEST_CASE(bmp_decodes_8_24_and_32_bit_files) {
  // 24 bits, bottom-up, 5 pixels a row (15 bytes, padded to 16): pixel (x, y) is (x, y, x + y) * 10 + 1
  const std::size_t w = 5, h = 3;
  auto rgb = [](std::size_t x, std::size_t y) { return std::array<unsigned char, 3>{
      static_cast<unsigned char>(10 * x + 1), static_cast<unsigned char>(10 * y + 1), static_cast<unsigned char>(10 * (x + y) + 1)}; };
  const bytes b24 = bmp_of(w, std::int32_t(h), 24, 0, {}, [&](std::size_t fy, unsigned char* out) {
    for (std::size_t x = 0; x < w; ++x) {  // stored blue, green, red; the last row of the image first
      const auto c = rgb(x, h - 1 - fy);
      out[3 * x] = c[2], out[3 * x + 1] = c[1], out[3 * x + 2] = c[0];
    }
  });
  std::vector<float> want;
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t x = 0; x < w; ++x)
      for (unsigned char v : rgb(x, y)) want.push_back(v);
  const tensor t = data::decode_bmp(b24);
  BOOST_TEST((t.shape() == tensor::shape_type{h, w, 3}));
  BOOST_TEST(values(t) == want, boost::test_tools::per_element());
  BOOST_TEST(values(data::decode_image(b24)) == want, boost::test_tools::per_element());
  // channels: 4 adds an opaque alpha, 1 is gray by Pillow's weights
  const tensor rgba = data::decode_bmp(b24, 4);
  BOOST_TEST(rgba.data()[3] == 255.0f);
  const tensor gray = data::decode_bmp(b24, 1);
  const auto c = rgb(0, 0);
  BOOST_TEST(gray.data()[0] == float((c[0] * 19595u + c[1] * 38470u + c[2] * 7471u + 0x8000u) >> 16));
  // 8 bits through a palette of 3 (blue, green, red, 0), top-down (a negative height)
  const bytes palette{1, 2, 3, 0, 40, 50, 60, 0, 200, 210, 220, 0};
  bytes p8 = bmp_of(4, -2, 8, 0, palette, [](std::size_t y, unsigned char* out) {
    for (std::size_t x = 0; x < 4; ++x) out[x] = static_cast<unsigned char>((x + y) % 3);
  });
  put32(p8, 46, 3);  // colours used
  const tensor p = data::decode_bmp(p8);
  BOOST_TEST((p.shape() == tensor::shape_type{2, 4, 3}));
  BOOST_TEST((values(p) == std::vector<float>{3, 2, 1, 60, 50, 40, 220, 210, 200, 3, 2, 1,
                                               60, 50, 40, 220, 210, 200, 3, 2, 1, 60, 50, 40}),
             boost::test_tools::per_element());
  // 32 bits: plain (blue, green, red, alpha), and bit fields of another order with an alpha mask
  const bytes b32 = bmp_of(2, 1, 32, 0, {}, [](std::size_t, unsigned char* out) {
    const unsigned char px[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    std::copy(px, px + 8, out);
  });
  BOOST_TEST((values(data::decode_bmp(b32)) == std::vector<float>{3, 2, 1, 4, 7, 6, 5, 8}), boost::test_tools::per_element());
  bytes masks(16, 0);  // red in the low byte, green, blue, alpha in the high byte
  put32(masks, 0, 0x000000ffu), put32(masks, 4, 0x0000ff00u), put32(masks, 8, 0x00ff0000u), put32(masks, 12, 0xff000000u);
  const bytes fields = bmp_of(1, 1, 32, 3, {}, [](std::size_t, unsigned char* out) {
    const unsigned char px[4] = {9, 8, 7, 6};
    std::copy(px, px + 4, out);
  }, 56);
  bytes with_masks = fields;
  std::copy(masks.begin(), masks.end(), with_masks.begin() + 54);
  BOOST_TEST((values(data::decode_bmp(with_masks)) == std::vector<float>{9, 8, 7, 6}), boost::test_tools::per_element());
  // errors
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(bytes{'P', 'K', 0, 0}); }), "not a BMP"));
  BOOST_TEST(contains(error_of([&] { data::decode_image(bytes{'B', 'M', 0, 0, 0}); }), "decode_bmp: the file ends inside its header"));
  bytes rle = b24;
  put32(rle, 30, 1);
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(rle); }), "compression 1 is not decoded"));
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(bytes(b24.begin(), b24.end() - 3)); }), "run past the end of the file"));
  bytes outside = p8;
  outside.back() = 7;  // an index past the palette's 3 colours
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(outside); }), "colour index 7 is outside the palette of 3"));
  bytes huge = b24;
  put32(huge, 18, 100000), put32(huge, 22, 100000);
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(huge); }), "over the cap"));
}

BOOST_AUTO_TEST_CASE(bmp_decodes_1_4_and_16_bit_and_run_length_encoded_files) {
  // the palette of 3 (blue, green, red, 0): index 0 is RGB (3, 2, 1), 1 is (60, 50, 40), 2 is (220, 210, 200)
  const bytes palette{1, 2, 3, 0, 40, 50, 60, 0, 200, 210, 220, 0};
  auto colours = [](std::initializer_list<int> indices) {
    const float rgb[3][3] = {{3, 2, 1}, {60, 50, 40}, {220, 210, 200}};
    std::vector<float> out;
    for (int i : indices) out.insert(out.end(), rgb[i], rgb[i] + 3);
    return out;
  };
  // a file whose pixels are `stream` (run-length encoded) rather than rows
  auto encoded = [&](std::size_t w, std::int32_t h, unsigned bpp, std::uint32_t compression, const bytes& stream) {
    bytes b = bmp_of(w, h, bpp, compression, palette, [](std::size_t, unsigned char*) {});
    b.resize(14 + 40 + palette.size());
    b.insert(b.end(), stream.begin(), stream.end());
    return b;
  };
  // RLE8, bottom row first: a run of 3 and one of 1, end of line; a delta 1 right, a literal of 3 (padded
  // to 16 bits), end of line; a run of 2, end of bitmap (the rest index 0)
  const bytes rle8 = encoded(4, 3, 8, 1, {3, 1, 1, 2, 0, 0, 0, 2, 1, 0, 0, 3, 2, 1, 2, 0, 0, 0, 2, 2, 0, 1});
  BOOST_TEST(values(data::decode_bmp(rle8)) == colours({2, 2, 0, 0, 0, 2, 1, 2, 1, 1, 1, 2}), boost::test_tools::per_element());
  // RLE4: a literal of 3 indices (two bytes, the last nibble unused) and a run alternating 1 and 1; a run
  // alternating 1 and 2 over the row
  const bytes rle4 = encoded(5, 2, 4, 2, {0, 3, 0x21, 0x00, 2, 0x11, 0, 0, 5, 0x12, 0, 1});
  BOOST_TEST(values(data::decode_bmp(rle4)) == colours({1, 2, 1, 2, 1, 2, 1, 0, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(bytes(rle8.begin(), rle8.end() - 6)); }),
                      "before an end-of-bitmap mark (truncated)"));
  BOOST_TEST(contains(error_of([&] { data::decode_bmp(encoded(4, -3, 8, 1, {0, 1})); }), "cannot be top-down"));
  // 4 and 1 bits a pixel, the first pixel in the high bits
  const bytes b4 = bmp_of(3, 1, 4, 0, palette, [](std::size_t, unsigned char* out) { out[0] = 0x12, out[1] = 0x00; });
  BOOST_TEST(values(data::decode_bmp(b4)) == colours({1, 2, 0}), boost::test_tools::per_element());
  const bytes b1 = bmp_of(10, 1, 1, 0, palette, [](std::size_t, unsigned char* out) { out[0] = 0b10110000, out[1] = 0b01000000; });
  BOOST_TEST(values(data::decode_bmp(b1)) == colours({1, 0, 1, 1, 0, 0, 0, 0, 0, 1}), boost::test_tools::per_element());
  // 16 bits: 5-5-5 without masks, 5-6-5 by bit masks; a channel of n bits scaled by 255 / (2^n - 1), truncated
  const bytes b555 = bmp_of(2, 1, 16, 0, {}, [](std::size_t, unsigned char* out) {
    const unsigned v[2] = {0x7fff, 1 << 10 | 2 << 5 | 3};  // white; red 1, green 2, blue 3 of 31
    for (int i = 0; i < 2; ++i) out[2 * i] = static_cast<unsigned char>(v[i]), out[2 * i + 1] = static_cast<unsigned char>(v[i] >> 8);
  });
  BOOST_TEST((values(data::decode_bmp(b555)) == std::vector<float>{255, 255, 255, 8, 16, 24}), boost::test_tools::per_element());
  bytes masks(12, 0);
  put32(masks, 0, 0xf800), put32(masks, 4, 0x07e0), put32(masks, 8, 0x001f);
  const bytes b565 = bmp_of(2, 1, 16, 3, masks, [](std::size_t, unsigned char* out) {
    const unsigned v[2] = {0xffe0, 3 << 11 | 5 << 5 | 7};  // yellow; red 3 of 31, green 5 of 63, blue 7 of 31
    for (int i = 0; i < 2; ++i) out[2 * i] = static_cast<unsigned char>(v[i]), out[2 * i + 1] = static_cast<unsigned char>(v[i] >> 8);
  });
  BOOST_TEST((values(data::decode_bmp(b565)) == std::vector<float>{255, 255, 0, 24, 20, 57}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gif_decodes_its_frames_on_the_screen) {
  // a 6 x 5 screen; the first frame 4 x 3 at (1, 1), interlaced, colour index (x + y) % 4 with index 2
  // transparent: zeros off the frame and where transparent
  for (bool interlace : {false, true}) {
    const bytes gif = gif_of(6, 5, 1, 1, 4, 3, interlace, 2, [](int x, int y) { return (x + y) % 4; });
    const float colours[4][3] = {{10, 20, 30}, {200, 100, 50}, {0, 255, 0}, {255, 255, 255}};
    std::vector<float> want(6 * 5 * 3, 0.0f);
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x) {
        const int i = (x + y) % 4;
        if (i != 2) std::copy_n(colours[i], 3, want.begin() + ((y + 1) * 6 + (x + 1)) * 3);
      }
    const tensor first = data::decode_image(gif);
    BOOST_TEST((first.shape() == tensor::shape_type{5, 6, 3}));
    BOOST_TEST(values(first) == want, boost::test_tools::per_element());
    BOOST_TEST((data::decode_image(gif, 4).shape() == tensor::shape_type{5, 6, 4}));
    // decode_gif: both frames, the second (all colour 3, over the whole screen) drawn over the first
    const tensor all = data::decode_gif(gif);
    BOOST_TEST((all.shape() == tensor::shape_type{2, 5, 6, 3}));
    BOOST_TEST(std::vector<float>(all.begin(), all.begin() + 90) == want, boost::test_tools::per_element());
    BOOST_TEST(std::vector<float>(all.begin() + 90, all.end()) == std::vector<float>(90, 255.0f), boost::test_tools::per_element());
  }
  const bytes gif = gif_of(4, 4, 0, 0, 4, 4, false, -1, [](int x, int) { return x; });
  BOOST_TEST(contains(error_of([&] { data::decode_gif(bytes(gif.begin(), gif.begin() + long(gif.size() / 2))); }), "decode_gif: "));
  BOOST_TEST(contains(error_of([&] { data::decode_gif(bytes{'G', 'I', 'F'}); }), "not a GIF"));
  bytes outside = gif;  // the first frame's descriptor (after 13 + 12 + 8 bytes of header, table and control) moved off the screen
  outside[13 + 12 + 8 + 1] = 3;
  BOOST_TEST(contains(error_of([&] { data::decode_gif(outside); }), "frame 0 (4 x 4 at 3, 0) lies outside the 4 x 4 screen"));
  data::max_image_bytes = 4 * 4 * 3;  // room for one frame, not for two
  BOOST_TEST(data::decode_image(gif).size() == 48u);
  BOOST_TEST(contains(error_of([&] { data::decode_gif(gif); }), "2 frames of 4 x 4 are over the cap of 48 bytes"));
  data::max_image_bytes = std::size_t(1) << 28;
}

BOOST_AUTO_TEST_CASE(jpeg_decodes_within_its_loss) {
  const std::size_t w = 16, h = 12;
  bytes smooth(w * h * 3);  // a gradient: what JPEG keeps well
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t x = 0; x < w; ++x)
      for (std::size_t k = 0; k < 3; ++k) smooth[(y * w + x) * 3 + k] = static_cast<unsigned char>(20 + 6 * x + 5 * y + 30 * k);
  const bytes file = jpeg_of(smooth, w, h, 3);
  for (bool accurate : {true, false}) {
    const tensor t = data::decode_jpeg(file, 0, accurate);
    BOOST_TEST((t.shape() == tensor::shape_type{h, w, 3}));
    float worst = 0;
    for (std::size_t i = 0; i < smooth.size(); ++i) worst = std::max(worst, std::abs(t.data()[i] - float(smooth[i])));
    BOOST_TEST(worst <= 8.0f);
  }
  // gray files decode to one channel; RGB to one when asked; decode_image adds an opaque alpha for 4
  const bytes gray(w * h, 128);
  const tensor g = data::decode_jpeg(jpeg_of(gray, w, h, 1));
  BOOST_TEST((g.shape() == tensor::shape_type{h, w, 1}));
  BOOST_TEST(std::abs(g.data()[0] - 128.0f) <= 1.0f);
  BOOST_TEST(data::decode_jpeg(file, 1).shape()[2] == 1u);
  const tensor four = data::decode_image(file, 4);
  BOOST_TEST(four.shape()[2] == 4u);
  BOOST_TEST(four.data()[3] == 255.0f);
  // truncated, not a JPEG, channels it does not have
  BOOST_TEST(contains(error_of([&] { data::decode_jpeg(bytes(file.begin(), file.begin() + long(file.size() * 2 / 3))); }), "decode_jpeg: "));
  BOOST_TEST(contains(error_of([&] { data::decode_jpeg(bytes{1, 2, 3, 4}); }), "not a JPEG"));
  BOOST_TEST(contains(error_of([&] { data::decode_jpeg(file, 4); }), "channels 4 is not one of 0, 1, 3"));
  BOOST_TEST(contains(error_of([&] { data::decode_image(bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0}); }), "not a PNG, JPEG, BMP or GIF file"));
}

BOOST_AUTO_TEST_CASE(resize_samples_at_half_pixel_centres_as_tf) {
  // one row [0, 4] to 4 wide: in = (out + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped at the edges
  tensor row = zeros({1, 2, 1});
  row.data()[1] = 4.0f;
  BOOST_TEST(values(data::resize(row, 1, 4)) == (std::vector<float>{0.0f, 1.0f, 3.0f, 4.0f}), boost::test_tools::per_element());
  BOOST_TEST(values(data::resize(row, 1, 4, data::interpolation::nearest)) == (std::vector<float>{0, 0, 4, 4}),
             boost::test_tools::per_element());
  // [0, 1, 2, 3] to 2 wide: in = (out + 0.5) * 2 - 0.5 = 0.5, 2.5
  tensor four = zeros({1, 4, 1});
  for (int i = 0; i < 4; ++i) four.data()[i] = float(i);
  BOOST_TEST(values(data::resize(four, 1, 2)) == (std::vector<float>{0.5f, 2.5f}), boost::test_tools::per_element());
  // the same size is the image itself; 2-D bilinear mixes the four neighbours
  const bytes px = random_pixels(5 * 6 * 3, 6);
  tensor img = zeros({5, 6, 3});
  std::copy(px.begin(), px.end(), img.data());
  BOOST_TEST(values(data::resize(img, 5, 6)) == values(img), boost::test_tools::per_element());
  tensor square = zeros({2, 2, 1});
  square.data()[3] = 8.0f;  // bottom right
  // out (1, 1) of 4 x 4: in (0.25, 0.25): 8 * 0.25 * 0.25
  BOOST_TEST(data::resize(square, 4, 4).data()[5] == 0.5f);
  BOOST_CHECK_THROW(data::resize(zeros({4, 4}), 2, 2), shape_error);
  BOOST_CHECK_THROW(data::resize(img, 0, 2), value_error);
}

BOOST_AUTO_TEST_CASE(resize_keeps_the_aspect_ratio_by_cropping_or_padding_first) {
  // a 2 x 6 image (columns 0..5) to 2 x 2: crop takes the centred 2 x 2 window (columns 2, 3)
  tensor wide = zeros({2, 6, 1});
  for (std::size_t i = 0; i < 12; ++i) wide.data()[i] = float(i % 6);
  BOOST_TEST(values(data::resize(wide, 2, 2, data::interpolation::nearest, data::aspect_ratio::crop)) ==
                 (std::vector<float>{2, 3, 2, 3}), boost::test_tools::per_element());
  // pad: 2 rows of zeros above and below make it 6 x 6 (then resized)
  const tensor padded = data::detail::to_aspect_ratio(wide, 2, 2, data::aspect_ratio::pad);
  BOOST_TEST(extents_of(padded) == (extents{6, 6, 1}), boost::test_tools::per_element());
  std::vector<float> want(36, 0.0f);
  std::copy(wide.begin(), wide.end(), want.begin() + 12);
  BOOST_TEST(values(padded) == want, boost::test_tools::per_element());
  // a tall one is padded left and right, as much on each side, rounded down as Keras pads: 6 x 3 to a
  // square becomes 6 x 5 (one column each side), not 6 x 6
  BOOST_TEST(extents_of(data::detail::to_aspect_ratio(zeros({6, 3, 1}), 1, 1, data::aspect_ratio::pad)) ==
                 (extents{6, 5, 1}), boost::test_tools::per_element());
  // the same ratio already: stretch, crop and pad agree
  tensor img = zeros({4, 6, 2});
  for (std::size_t i = 0; i < img.size(); ++i) img.data()[i] = float(i);
  for (auto a : {data::aspect_ratio::crop, data::aspect_ratio::pad})
    BOOST_TEST(values(data::resize(img, 2, 3, data::interpolation::bilinear, a)) == values(data::resize(img, 2, 3)),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(image_dataset_from_directory_labels_by_class_folder) {
  // classes "ants" (3 JPEGs, one in a nested folder) and "bees" (2 PNGs); each image one gray level
  temp_dir t;
  const fs::path root = t.path;
  fs::create_directories(root / "ants" / "more");
  fs::create_directories(root / "bees");
  std::map<float, float> label_of;  // gray level -> class
  auto image = [](unsigned char v, std::size_t w) { return bytes(w * w * 3, v); };
  const std::vector<std::pair<fs::path, unsigned char>> files{
      {root / "ants" / "a1.jpg", 20}, {root / "ants" / "a2.JPEG", 60}, {root / "ants" / "more" / "a3.jpg", 100},
      {root / "bees" / "b1.png", 140}, {root / "bees" / "b2.png", 180}};
  for (const auto& [p, v] : files) {
    write(p, p.extension() == ".png" ? png_of(image(v, 12), 12, 12, 3) : jpeg_of(image(v, 10), 10, 10, 3, 100));
    label_of[float(v)] = p.parent_path().filename() == "bees" ? 1.0f : 0.0f;
  }
  write(root / "bees" / "notes.txt", bytes{'x'});  // not an image: not listed
  auto near = [](float a, float b) { return std::abs(a - b) <= 2.0f; };
  const auto unshuffled = data::image_dataset_from_directory(root.string(),
                                                             {.batch_size = 2, .image_size = {8, 8}, .shuffle = false, .verbose = false});
  auto it = unshuffled.iterate(0);
  const auto first = it.next();
  BOOST_REQUIRE(first.has_value());
  BOOST_TEST((first->first.shape() == tensor::shape_type{2, 8, 8, 3}));
  BOOST_TEST((first->second.shape() == tensor::shape_type{2}));
  const auto in_order = pixels_and_labels(unshuffled);
  BOOST_REQUIRE(in_order.size() == files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {  // ants' files in byte order (a1, a2, more/a3), then bees'
    BOOST_TEST(near(in_order[i].first, float(files[i].second)), i);
    BOOST_TEST(in_order[i].second == label_of[float(files[i].second)]);
  }
  // a split with a seed: the subsets part the files, each keeping its label
  data::image_directory_options o{.label_mode = "categorical", .batch_size = 3, .image_size = {4, 4}, .seed = 11,
                                  .validation_split = 0.4f, .subset = "training", .verbose = false};
  const auto training = pixels_and_labels(data::image_dataset_from_directory(root.string(), o));
  o.subset = "validation";
  const auto validation = pixels_and_labels(data::image_dataset_from_directory(root.string(), o));
  BOOST_TEST(training.size() == 3u);
  BOOST_TEST(validation.size() == 2u);
  std::vector<float> seen;
  for (const auto* part : {&training, &validation})
    for (const auto& [v, label] : *part) {  // categorical: the last one-hot value is 1 for bees
      const auto match = std::find_if(files.begin(), files.end(), [&](const auto& f) { return near(v, float(f.second)); });
      BOOST_REQUIRE(match != files.end());
      BOOST_TEST(label == label_of[float(match->second)]);
      seen.push_back(float(match->second));
    }
  std::sort(seen.begin(), seen.end());
  BOOST_TEST((std::adjacent_find(seen.begin(), seen.end()) == seen.end()));  // no file in both
  // grayscale and binary labels
  const auto gray = data::image_dataset_from_directory(
      root.string(), {.label_mode = "binary", .color_mode = "grayscale", .image_size = {3, 5}, .shuffle = false, .verbose = false});
  const auto batch = gray.iterate(0).next();
  BOOST_TEST((batch->first.shape() == tensor::shape_type{5, 3, 5, 1}));
  BOOST_TEST((batch->second.shape() == tensor::shape_type{5, 1}));
  // errors
  BOOST_TEST(contains(error_of([&] { data::image_dataset_from_directory((root / "none").string()); }), "is not a folder"));
  BOOST_TEST(contains(error_of([&] {
    data::image_dataset_from_directory(root.string(), {.validation_split = 0.2f, .subset = "training", .verbose = false});
  }), "give a seed"));
  BOOST_TEST(contains(error_of([&] { data::image_dataset_from_directory(root.string(), {.label_mode = "sparse", .verbose = false}); }),
                      "label_mode \"sparse\""));
  fs::create_directories(root / "wasps");
  BOOST_TEST(contains(error_of([&] { data::image_dataset_from_directory(root.string(), {.label_mode = "binary", .verbose = false}); }),
                      "needs 2 classes"));
  write(root / "wasps" / "w.bmp", bytes{'B', 'M'});  // listed, and named when read
  const auto broken_bmp = data::image_dataset_from_directory(root.string(), {.shuffle = false, .verbose = false});
  BOOST_TEST(contains(error_of([&] { pixels_and_labels(broken_bmp); }), "w.bmp: decode_bmp"));
  fs::remove(root / "wasps" / "w.bmp");
  write(root / "wasps" / "w.png", bytes{1, 2, 3});
  const auto broken = data::image_dataset_from_directory(root.string(), {.shuffle = false, .verbose = false});
  BOOST_TEST(contains(error_of([&] { pixels_and_labels(broken); }), "w.png: decode_image"));
}

BOOST_AUTO_TEST_CASE(image_dataset_from_directory_with_a_list_of_labels_or_none) {
  // files at three depths: Keras walks a folder's own files by name, then its subfolders' (so z.png
  // comes before sub/a.png, which a sort of the whole paths would put first)
  temp_dir t;
  const fs::path root = t.path;
  fs::create_directories(root / "sub" / "deeper");
  const std::vector<std::pair<fs::path, unsigned char>> files{{root / "b.png", 30},
                                                               {root / "z.png", 70},
                                                               {root / "sub" / "a.png", 110},
                                                               {root / "sub" / "deeper" / "c.png", 150}};
  for (const auto& [p, v] : files) write(p, png_of(bytes(6 * 6 * 3, v), 6, 6, 3));
  auto near = [](float a, float b) { return std::abs(a - b) <= 2.0f; };
  const std::vector<int> labels{2, 0, 1, 2};
  const auto listed = pixels_and_labels(data::image_dataset_from_directory(
      root.string(), {.labels = labels, .image_size = {4, 4}, .shuffle = false, .verbose = false}));
  BOOST_REQUIRE(listed.size() == files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    BOOST_TEST(near(listed[i].first, float(files[i].second)), i);
    BOOST_TEST(listed[i].second == float(labels[i]), i);
  }
  // categorical: as many classes as the largest label + 1
  const auto onehot = data::image_dataset_from_directory(
      root.string(), {.labels = labels, .label_mode = "categorical", .batch_size = 4, .shuffle = false, .verbose = false});
  BOOST_TEST((onehot.iterate(0).next()->second.shape() == tensor::shape_type{4, 3}));
  // labels=None: images alone, every file under the folder, shuffled with the seed as the labelled ones
  const auto images = data::image_dataset_from_directory(root.string(), data::no_labels,
                                                         {.batch_size = 3, .image_size = {4, 4}, .seed = 5, .verbose = false});
  std::vector<float> seen;
  auto it = images.iterate(0);
  while (const auto b = it.next()) {
    static_assert(std::is_same_v<std::decay_t<decltype(*b)>, tensor>, "no_labels: batches of images alone");
    for (std::size_t i = 0; i < b->shape()[0]; ++i) seen.push_back(b->data()[i * 4 * 4 * 3]);
  }
  BOOST_TEST(seen.size() == files.size());
  std::sort(seen.begin(), seen.end());
  for (std::size_t i = 0; i < files.size(); ++i) BOOST_TEST(near(seen[i], float(files[i].second)));
  // a list of the wrong length, a negative label, binary with three classes, class_names with a list
  auto error = [&](data::image_directory_options o) {
    o.verbose = false;
    return error_of([&] { data::image_dataset_from_directory(root.string(), o); });
  };
  BOOST_TEST(contains(error({.labels = {0, 1}}), "2 labels for the 4 image files under"));
  BOOST_TEST(contains(error({.labels = {0, 1, -1, 0}}), "label -1 of"));
  BOOST_TEST(contains(error({.labels = labels, .label_mode = "binary"}), "needs 2 classes"));
  BOOST_TEST(contains(error({.labels = labels, .class_names = {"x"}}), "class_names needs labels inferred"));
}

BOOST_AUTO_TEST_SUITE_END()
#endif
