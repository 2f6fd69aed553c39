#pragma once
/// \file
/// Images (link `dtrain::image`: libpng, libjpeg-turbo and giflib): tf.io's `decode_png`, `decode_jpeg`,
/// `decode_bmp`, `decode_gif` and `decode_image`, tf.image's `resize` (bilinear or nearest, half-pixel
/// centres as TF 2 has them) and keras.utils' `image_dataset_from_directory`.
///
/// A decoded image is an (height, width, channels) tensor of the pixel values 0-255 (TF's uint8, as
/// floats). Bad input (not an image, truncated, a corrupt chunk or scan, more pixels than
/// `max_image_bytes`) is an `io_error` that names what was wrong; the decoders allocate nothing before
/// the header has been checked against the cap.

#include <cstddef>
#include <cstdio>  // before jpeglib.h, which needs size_t and FILE

#include <gif_lib.h>
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/batch.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/shuffle.hpp"

namespace dtrain::data {

/// The most bytes a decoded image may take (8-bit samples; 256 MiB unless set, as Pillow's
/// `Image.MAX_IMAGE_PIXELS` is): a hostile or corrupt header cannot make a decoder allocate more, nor
/// spend the time a larger image takes. Read at each decode.
inline std::atomic<std::size_t> max_image_bytes{std::size_t(1) << 28};

namespace detail {
/// What one decoding stage found: an error message (empty: none) and the output's size.
struct image_header {
  char error[200] = {};
  std::size_t height = 0, width = 0, channels = 0;
};
inline void check_image_size(const char* what, const image_header& h) {
  if (h.height == 0 || h.width == 0)
    throw io_error(std::string(what) + ": an image of " + std::to_string(h.width) + " x " + std::to_string(h.height) + " pixels");
  const std::size_t cap = max_image_bytes.load();
  if (h.height > cap / h.width / h.channels)
    throw io_error(std::string(what) + ": an image of " + std::to_string(h.width) + " x " + std::to_string(h.height) + " x " +
                   std::to_string(h.channels) + " values is over the cap of " + std::to_string(cap) + " bytes (max_image_bytes)");
}
/// Room for the pixels, left uninitialised: a file that claims many pixels and ends early costs no
/// more than the pages its rows reached.
inline std::unique_ptr<unsigned char[]> image_buffer(const image_header& h) {
  return std::make_unique_for_overwrite<unsigned char[]>(h.height * h.width * h.channels);
}
inline tensor image_tensor(const image_header& h, const unsigned char* pixels) {
  tensor t = zeros({h.height, h.width, h.channels});
  std::copy_n(pixels, t.size(), t.data());
  return t;
}

// ---- PNG (libpng). Its errors longjmp back to the setjmp of the stage that called it; each stage's frame
// holds no object with a destructor, so nothing is skipped. ------------------------------------------------
struct png_source {
  const unsigned char* data;
  std::size_t size, at;
};
struct png_reader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  png_source source;
  image_header h;
  int passes = 1;
  ~png_reader() { png_destroy_read_struct(&png, &info, nullptr); }
};
inline void png_fail(png_structp png, png_const_charp message) {
  auto* r = static_cast<png_reader*>(png_get_error_ptr(png));
  std::snprintf(r->h.error, sizeof r->h.error, "%s", message);
  png_longjmp(png, 1);
}
inline void png_quiet(png_structp, png_const_charp) {}  // warnings (an odd ancillary chunk) are not errors
inline void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto& s = static_cast<png_reader*>(png_get_io_ptr(png))->source;
  if (n > s.size - s.at) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, s.data + s.at, n);
  s.at += n;
}
/// Reads the header and sets the transforms to 8-bit samples in `channels` (0: the file's own).
inline bool png_stage_header(png_reader& r, int channels) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_set_read_fn(r.png, &r, png_read_bytes);
  png_set_user_limits(r.png, 1u << 24, 1u << 24);
  png_read_info(r.png, r.info);
  const int type = png_get_color_type(r.png, r.info);
  png_set_expand(r.png);  // palette -> RGB, gray below 8 bits -> 8, tRNS -> alpha
  if (png_get_bit_depth(r.png, r.info) == 16) png_set_scale_16(r.png);
  const bool color = type & PNG_COLOR_MASK_COLOR;
  const bool alpha = (type & PNG_COLOR_MASK_ALPHA) || png_get_valid(r.png, r.info, PNG_INFO_tRNS);
  if (channels == 1 || channels == 2) {
    if (color) png_set_rgb_to_gray_fixed(r.png, 1, -1, -1);
    if (channels == 1 && alpha) png_set_strip_alpha(r.png);
    if (channels == 2 && !alpha) png_set_add_alpha(r.png, 0xff, PNG_FILLER_AFTER);
  } else if (channels == 3 || channels == 4) {
    if (!color) png_set_gray_to_rgb(r.png);
    if (channels == 3 && alpha) png_set_strip_alpha(r.png);
    if (channels == 4 && !alpha) png_set_add_alpha(r.png, 0xff, PNG_FILLER_AFTER);
  }
  r.passes = png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  r.h.height = png_get_image_height(r.png, r.info);
  r.h.width = png_get_image_width(r.png, r.info);
  r.h.channels = png_get_channels(r.png, r.info);
  return true;
}
inline bool png_stage_pixels(png_reader& r, unsigned char* out) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  const std::size_t stride = r.h.width * r.h.channels;
  for (int pass = 0; pass < r.passes; ++pass)  // (an interlaced file: each pass fills in every row)
    for (std::size_t y = 0; y < r.h.height; ++y) png_read_row(r.png, out + y * stride, nullptr);
  png_read_end(r.png, nullptr);
  return true;
}

// ---- JPEG (libjpeg-turbo), the same way ---------------------------------------------------------------
struct jpeg_reader {
  jpeg_decompress_struct cinfo{};
  struct : jpeg_error_mgr {
    std::jmp_buf* at = nullptr;
    char* message = nullptr;
  } err;
  image_header h;
  bool created = false;
  ~jpeg_reader() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};
inline void jpeg_fail(j_common_ptr c) {
  auto& e = *static_cast<decltype(jpeg_reader::err)*>(c->err);
  (*c->err->format_message)(c, e.message);
  std::longjmp(*e.at, 1);
}
inline void jpeg_message(j_common_ptr c, int level) {
  if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(c);  // truncated: an error, as in TF
}
/// Reads the header and asks for 8-bit samples in `channels` (0: gray for a gray file, else RGB).
inline bool jpeg_stage_header(jpeg_reader& r, std::span<const unsigned char> bytes, int channels, bool accurate) {
  std::jmp_buf at;
  r.err.at = &at;
  if (setjmp(at)) return false;
  jpeg_create_decompress(&r.cinfo);
  r.created = true;
  r.cinfo.mem->max_memory_to_use = long(2 * max_image_bytes.load());
  jpeg_mem_src(&r.cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&r.cinfo, TRUE);
  if (r.cinfo.num_components == 4) {
    std::snprintf(r.h.error, sizeof r.h.error, "a CMYK or YCCK JPEG (4 components) is not decoded");
    return true;
  }
  const bool gray = r.cinfo.jpeg_color_space == JCS_GRAYSCALE;
  r.cinfo.out_color_space = channels == 1 || (channels == 0 && gray) ? JCS_GRAYSCALE : JCS_RGB;
  r.cinfo.dct_method = accurate ? JDCT_ISLOW : JDCT_IFAST;
  jpeg_calc_output_dimensions(&r.cinfo);
  r.h.height = r.cinfo.output_height;
  r.h.width = r.cinfo.output_width;
  r.h.channels = std::size_t(r.cinfo.output_components);
  return true;
}
inline bool jpeg_stage_pixels(jpeg_reader& r, unsigned char* out) {
  std::jmp_buf at;
  r.err.at = &at;
  if (setjmp(at)) return false;
  jpeg_start_decompress(&r.cinfo);
  const std::size_t stride = std::size_t(r.cinfo.output_width) * std::size_t(r.cinfo.output_components);
  while (r.cinfo.output_scanline < r.cinfo.output_height) {
    JSAMPROW row = out + std::size_t(r.cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&r.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&r.cinfo);
  return true;
}
inline void check_channels(const char* what, int channels, std::initializer_list<int> allowed) {
  if (std::find(allowed.begin(), allowed.end(), channels) != allowed.end()) return;
  std::string list;
  for (int a : allowed) list += (list.empty() ? "" : ", ") + std::to_string(a);
  throw value_error(std::string(what) + ": channels " + std::to_string(channels) + " is not one of " + list);
}

/// RGB or RGBA pixels (h.channels 3 or 4) as an image of `channels` (0: as they are; 1: gray by Pillow's
/// weights, 299 / 587 / 114 thousandths; 3: alpha dropped; 4: an opaque alpha added).
inline tensor rgb_image(const image_header& h, const unsigned char* pixels, int channels) {
  const std::size_t from = h.channels, to = channels == 0 ? from : std::size_t(channels), n = h.height * h.width;
  tensor t = zeros({h.height, h.width, to});
  float* out = t.data();
  for (std::size_t i = 0; i < n; ++i, out += to) {
    const unsigned char* p = pixels + i * from;
    if (to == 1) {
      out[0] = float((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    } else {
      for (std::size_t c = 0; c < 3; ++c) out[c] = p[c];
      if (to == 4) out[3] = from == 4 ? p[3] : 255.0f;
    }
  }
  return t;
}

// ---- BMP, read here: the header's fields are few and fixed, and no Debian library decodes BMP alone. ----
inline std::uint32_t le32(const unsigned char* p) { return std::uint32_t(dtrain::detail::le(p, 4)); }
inline std::uint16_t le16(const unsigned char* p) { return std::uint16_t(dtrain::detail::le(p, 2)); }
/// A BMP's channel from a 16- or 32-bit pixel by its bit mask, scaled to 8 bits.
inline unsigned char masked_channel(std::uint32_t pixel, std::uint32_t mask) {
  if (mask == 0) return 255;
  int shift = 0, bits = 0;
  while (!(mask >> shift & 1)) ++shift;
  while (shift + bits < 32 && (mask >> (shift + bits) & 1)) ++bits;
  const std::uint32_t v = (pixel & mask) >> shift, top = (std::uint64_t(1) << bits) - 1;
  return static_cast<unsigned char>(std::uint64_t(v) * 255 / top);  // (truncated, as Pillow's 5- and 6-bit unpackers)
}

/// A run-length encoded BMP's colour indices (BI_RLE8, or BI_RLE4 with `four`), one byte a pixel in the
/// file's row order, as Pillow expands them: runs of one index (two alternating ones for RLE4; not past
/// the row's end), literal runs padded to 16 bits, end of line, end of bitmap and delta escapes; what no
/// run reaches is index 0. Data that ends before the pixels and without an end-of-bitmap is an error,
/// found before anything is allocated.
inline std::vector<unsigned char> bmp_run_lengths(std::span<const unsigned char> bytes, std::size_t start,
                                                  const image_header& h, bool four) {
  const std::size_t w = h.width, total = w * h.height;
  // walked twice: first to check the stream, so that a truncated one is refused before anything is
  // allocated, then writing the indices (`out`)
  auto walk = [&](unsigned char* out) {
    std::size_t pos = 0, at = start;
    auto truncated = [&] {
      return io_error("decode_bmp: the run-length encoded pixels end at pixel " + std::to_string(pos) + " of " +
                      std::to_string(total) + ", before an end-of-bitmap mark (truncated)");
    };
    while (pos < total) {
      if (bytes.size() - at < 2) throw truncated();
      const unsigned count = bytes[at], value = bytes[at + 1];
      at += 2;
      if (count > 0) {  // a run of `count` pixels, not past the row's end
        const std::size_t n = std::min<std::size_t>(count, w - pos % w);
        for (std::size_t k = 0; out && k < n; ++k)
          out[pos + k] = static_cast<unsigned char>(four ? (k % 2 ? value & 15 : value >> 4) : value);
        pos += n;
      } else if (value == 0) {  // end of line
        if (pos % w) pos += w - pos % w;
      } else if (value == 1) {  // end of bitmap
        break;
      } else if (value == 2) {  // delta: right, then up (rows in the file's order)
        if (bytes.size() - at < 2) throw truncated();
        pos = std::min(total, pos + bytes[at] + std::size_t(bytes[at + 1]) * w);
        at += 2;
      } else {  // `value` literal indices, in bytes padded to 16 bits
        const std::size_t stored = four ? (value + 1) / 2 : value;
        if (bytes.size() - at < stored) throw truncated();
        const std::size_t n = std::min<std::size_t>(value, total - pos);
        for (std::size_t k = 0; out && k < n; ++k)
          out[pos + k] = four ? static_cast<unsigned char>(k % 2 ? bytes[at + k / 2] & 15 : bytes[at + k / 2] >> 4) : bytes[at + k];
        pos += n;
        at = std::min(bytes.size(), at + stored + (at + stored) % 2);  // (16-bit alignment in the file, as Pillow's)
      }
    }
  };
  walk(nullptr);
  std::vector<unsigned char> out(total, 0);
  walk(out.data());
  return out;
}

// ---- GIF (giflib): the first frame, as tf.io.decode_image(expand_animations=False) gives it --------------
struct gif_source {
  const unsigned char* data;
  std::size_t size, at;
};
inline int gif_read(GifFileType* g, GifByteType* out, int n) {
  auto* s = static_cast<gif_source*>(g->UserData);
  const std::size_t k = std::min<std::size_t>(std::size_t(n), s->size - s->at);
  std::memcpy(out, s->data + s->at, k);
  s->at += k;
  return int(k);
}
struct gif_file {
  GifFileType* g = nullptr;
  gif_file() = default;
  gif_file(const gif_file&) = delete;
  gif_file& operator=(const gif_file&) = delete;
  ~gif_file() {
    int ignored = 0;
    if (g) DGifCloseFile(g, &ignored);
  }
  [[noreturn]] void fail(const char* doing) const {
    const char* why = GifErrorString(g->Error);
    throw io_error(std::string("decode_gif: ") + doing + " (" + (why ? why : "giflib error") + ")");
  }
};
}  // namespace detail

/// `tf.io.decode_png(contents, channels=0)`: channels 0 keeps the file's (1 gray, 2 gray and alpha, 3 RGB,
/// 4 RGBA); 1, 2, 3 or 4 converts (gray from RGB by libpng's ITU-R 709 weights, an opaque alpha added).
/// 16-bit samples are scaled to 8 bits.
inline tensor decode_png(std::span<const unsigned char> bytes, int channels = 0) {
  detail::check_channels("decode_png", channels, {0, 1, 2, 3, 4});
  if (bytes.size() < 8 || png_sig_cmp(bytes.data(), 0, 8) != 0) throw io_error("decode_png: not a PNG file (no PNG signature)");
  detail::png_reader r;
  r.source = {bytes.data(), bytes.size(), 0};
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, detail::png_fail, detail::png_quiet);
  if (r.png) r.info = png_create_info_struct(r.png);
  if (!r.png || !r.info) throw io_error("decode_png: out of memory");
  if (!detail::png_stage_header(r, channels)) throw io_error(std::string("decode_png: ") + r.h.error);
  detail::check_image_size("decode_png", r.h);
  if (png_get_rowbytes(r.png, r.info) != r.h.width * r.h.channels) throw io_error("decode_png: unexpected row size");
  const auto pixels = detail::image_buffer(r.h);
  if (!detail::png_stage_pixels(r, pixels.get())) throw io_error(std::string("decode_png: ") + r.h.error);
  return detail::image_tensor(r.h, pixels.get());
}

/// `tf.io.decode_jpeg(contents, channels=0, dct_method=...)`: channels 0 keeps the file's (1 gray, else
/// 3 RGB), 1 or 3 converts. `accurate`: libjpeg's accurate integer IDCT ("INTEGER_ACCURATE", TF's choice
/// being platform-specific); false: "INTEGER_FAST". A truncated file is an error.
inline tensor decode_jpeg(std::span<const unsigned char> bytes, int channels = 0, bool accurate = true) {
  detail::check_channels("decode_jpeg", channels, {0, 1, 3});
  if (bytes.size() < 3 || bytes[0] != 0xff || bytes[1] != 0xd8) throw io_error("decode_jpeg: not a JPEG file (no SOI marker)");
  detail::jpeg_reader r;
  char message[JMSG_LENGTH_MAX] = {};
  r.cinfo.err = jpeg_std_error(&r.err);
  r.err.error_exit = detail::jpeg_fail;
  r.err.emit_message = detail::jpeg_message;
  r.err.message = message;
  if (!detail::jpeg_stage_header(r, bytes, channels, accurate)) throw io_error(std::string("decode_jpeg: ") + message);
  if (r.h.error[0]) throw io_error(std::string("decode_jpeg: ") + r.h.error);
  detail::check_image_size("decode_jpeg", r.h);
  const auto pixels = detail::image_buffer(r.h);
  if (!detail::jpeg_stage_pixels(r, pixels.get())) throw io_error(std::string("decode_jpeg: ") + message);
  return detail::image_tensor(r.h, pixels.get());
}

/// `tf.io.decode_bmp(contents, channels=0)`: BMPs of 1, 4 and 8 bits a pixel (a palette; 4 and 8 also
/// run-length encoded), 16 (5-5-5, or the file's bit masks), 24 (RGB) and 32 (RGBA: the fourth byte, or
/// the alpha of the file's bit masks), bottom-up or top-down, with any of the Windows headers, decoded
/// as Pillow decodes them; channels 0 keeps the file's (3, or 4 for 32 bits), 1, 3 or 4 converts.
inline tensor decode_bmp(std::span<const unsigned char> bytes, int channels = 0) {
  detail::check_channels("decode_bmp", channels, {0, 1, 3, 4});
  using detail::le16, detail::le32;
  const unsigned char* b = bytes.data();
  if (bytes.size() < 2 || b[0] != 'B' || b[1] != 'M') throw io_error("decode_bmp: not a BMP file (no BM signature)");
  if (bytes.size() < 26) throw io_error("decode_bmp: the file ends inside its header (truncated)");
  const std::uint32_t offset = le32(b + 10), header = le32(b + 14);
  const bool core = header == 12;  // the OS/2 header: 16-bit sizes, 3-byte palette entries
  if (!core && (header < 40 || header > 124)) throw io_error("decode_bmp: a header of " + std::to_string(header) + " bytes");
  if (bytes.size() < 14 + std::size_t(header)) throw io_error("decode_bmp: the file ends inside its header (truncated)");
  const std::int64_t width = core ? le16(b + 18) : std::int32_t(le32(b + 18));
  const std::int64_t height = core ? le16(b + 20) : std::int32_t(le32(b + 22));
  const unsigned bpp = core ? le16(b + 24) : le16(b + 28);
  const std::uint32_t compression = core ? 0 : le32(b + 30);
  const bool rle = (compression == 1 && bpp == 8) || (compression == 2 && bpp == 4);
  const bool bitfields = compression == 3 && (bpp == 16 || bpp == 32);
  if (!(compression == 0 && (bpp == 1 || bpp == 4 || bpp == 8 || bpp == 16 || bpp == 24 || bpp == 32)) && !rle &&
      !bitfields)
    throw io_error("decode_bmp: a BMP of " + std::to_string(bpp) + " bits a pixel with compression " +
                   std::to_string(compression) +
                   " is not decoded (only 1, 4, 8, 16, 24 and 32 bits, run-length encoded 4 and 8, bit masks for 16 and 32)");
  if (rle && height < 0) throw io_error("decode_bmp: a run-length encoded BMP cannot be top-down");
  detail::image_header h;
  h.width = width > 0 ? std::size_t(width) : 0;
  h.height = std::size_t(height < 0 ? -height : height);
  h.channels = bpp == 32 ? 4 : 3;
  detail::check_image_size("decode_bmp", h);
  // R, G, B, A of a plain 16- or 32-bit pixel
  std::uint32_t masks[4] = {0x00ff0000u, 0x0000ff00u, 0x000000ffu, 0xff000000u};
  if (bpp == 16) masks[0] = 0x7c00u, masks[1] = 0x03e0u, masks[2] = 0x001fu, masks[3] = 0;
  if (bitfields) {  // after a 40-byte header, or inside the larger ones
    if (bytes.size() < 14 + 40 + 12) throw io_error("decode_bmp: the file ends inside its bit masks (truncated)");
    for (int c = 0; c < 3; ++c) masks[c] = le32(b + 54 + 4 * c);
    masks[3] = header >= 56 && bpp == 32 ? le32(b + 66) : 0;
  }
  std::uint32_t palette_size = 0;
  const unsigned char* palette = b + 14 + header;
  const std::size_t entry = core ? 3 : 4;
  if (bpp <= 8) {
    const std::uint32_t most = 1u << bpp;
    palette_size = core ? most : le32(b + 46);
    if (palette_size == 0 || palette_size > most) palette_size = most;
    // (the palette ends where the pixels start, or with the file)
    const std::size_t end = offset > 14 + header ? std::min<std::size_t>(offset, bytes.size()) : bytes.size();
    palette_size = std::uint32_t(std::min<std::size_t>(palette_size, (end - 14 - header) / entry));
  }
  if (offset > bytes.size()) throw io_error("decode_bmp: the pixels start past the end of the file (truncated)");
  // the rows as stored (bottom-up unless the height is negative): a run-length encoded file's colour
  // indices are expanded first, one byte each
  std::vector<unsigned char> expanded;
  const unsigned char* rows = b + offset;
  std::size_t stride = (h.width * bpp + 31) / 32 * 4;
  if (rle) {
    expanded = detail::bmp_run_lengths(bytes, offset, h, bpp == 4);
    rows = expanded.data(), stride = h.width;
  } else if ((bytes.size() - offset) / stride < h.height) {
    throw io_error("decode_bmp: the pixels of " + std::to_string(h.width) + " x " + std::to_string(h.height) +
                   " run past the end of the file (truncated)");
  }
  const unsigned index_bits = rle ? 8 : bpp;
  const auto pixels = detail::image_buffer(h);
  for (std::size_t y = 0; y < h.height; ++y) {
    const unsigned char* row = rows + stride * (height < 0 ? y : h.height - 1 - y);
    unsigned char* out = pixels.get() + y * h.width * h.channels;
    for (std::size_t x = 0; x < h.width; ++x, out += h.channels) {
      if (bpp <= 8) {
        const unsigned i = index_bits == 8 ? row[x]  // else the first pixel in a byte's high bits
                                           : row[x * index_bits / 8] >> (8 - index_bits - x * index_bits % 8) & ((1u << index_bits) - 1);
        if (i >= palette_size)
          throw io_error("decode_bmp: colour index " + std::to_string(i) + " is outside the palette of " +
                         std::to_string(palette_size));
        const unsigned char* c = palette + entry * i;
        out[0] = c[2], out[1] = c[1], out[2] = c[0];
      } else if (bpp == 24) {
        out[0] = row[3 * x + 2], out[1] = row[3 * x + 1], out[2] = row[3 * x];
      } else {
        const std::uint32_t v = bpp == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
        for (std::size_t c = 0; c < h.channels; ++c) out[c] = detail::masked_channel(v, masks[c]);
      }
    }
  }
  return detail::rgb_image(h, pixels.get(), channels);
}

namespace detail {
/// A GIF's frames on its logical screen in RGB (`h`: the screen), each drawn over the one before (its
/// transparent pixels keeping what was there; zeros before the first); only the first when `first`.
inline std::vector<std::vector<unsigned char>> gif_frames(std::span<const unsigned char> bytes, bool first, image_header& h) {
  if (bytes.size() < 6 || std::memcmp(bytes.data(), "GIF8", 4) != 0) throw io_error("decode_gif: not a GIF file (no GIF signature)");
  gif_source source{bytes.data(), bytes.size(), 0};
  gif_file f;
  int error = 0;
  f.g = DGifOpen(&source, gif_read, &error);
  if (!f.g) {
    const char* why = GifErrorString(error);
    throw io_error(std::string("decode_gif: ") + (why ? why : "not a GIF file"));
  }
  h.width = std::size_t(std::max(0, f.g->SWidth));
  h.height = std::size_t(std::max(0, f.g->SHeight));
  h.channels = 3;
  check_image_size("decode_gif", h);
  std::vector<std::vector<unsigned char>> frames;
  std::vector<unsigned char> canvas(h.height * h.width * 3, 0);
  int transparent = -1;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(f.g, &type) == GIF_ERROR) f.fail("a damaged record");
    if (type == TERMINATE_RECORD_TYPE) break;
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(f.g, &code, &ext) == GIF_ERROR) f.fail("a damaged extension");
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) transparent = (ext[1] & 1) ? ext[4] : -1;
      while (ext)
        if (DGifGetExtensionNext(f.g, &ext) == GIF_ERROR) f.fail("a damaged extension");
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(f.g) == GIF_ERROR) f.fail("a damaged image descriptor");
    const std::size_t k = frames.size();
    if ((k + 1) * canvas.size() > max_image_bytes.load())
      throw io_error("decode_gif: " + std::to_string(k + 1) + " frames of " + std::to_string(h.width) + " x " +
                     std::to_string(h.height) + " are over the cap of " + std::to_string(max_image_bytes.load()) +
                     " bytes (max_image_bytes)");
    const GifImageDesc& d = f.g->Image;
    const ColorMapObject* colours = d.ColorMap ? d.ColorMap : f.g->SColorMap;
    if (!colours) throw io_error("decode_gif: frame " + std::to_string(k) + " has no colour table");
    if (d.Left < 0 || d.Top < 0 || d.Width <= 0 || d.Height <= 0 || std::size_t(d.Left) + std::size_t(d.Width) > h.width ||
        std::size_t(d.Top) + std::size_t(d.Height) > h.height)
      throw io_error("decode_gif: frame " + std::to_string(k) + " (" + std::to_string(d.Width) + " x " +
                     std::to_string(d.Height) + " at " + std::to_string(d.Left) + ", " + std::to_string(d.Top) +
                     ") lies outside the " + std::to_string(h.width) + " x " + std::to_string(h.height) + " screen");
    std::vector<GifPixelType> line(static_cast<std::size_t>(d.Width));
    // an interlaced frame's rows come in four passes: every 8th from 0, every 8th from 4, every 4th from 2, every 2nd from 1
    const int starts[4] = {0, 4, 2, 1}, steps[4] = {8, 8, 4, 2};
    for (int pass = 0; pass < (d.Interlace ? 4 : 1); ++pass)
      for (int y = d.Interlace ? starts[pass] : 0; y < d.Height; y += d.Interlace ? steps[pass] : 1) {
        if (DGifGetLine(f.g, line.data(), d.Width) == GIF_ERROR) f.fail("a frame's pixels are damaged or cut short");
        unsigned char* out = canvas.data() + ((std::size_t(d.Top) + std::size_t(y)) * h.width + std::size_t(d.Left)) * 3;
        for (int x = 0; x < d.Width; ++x, out += 3) {
          const int i = line[std::size_t(x)];
          if (i == transparent) continue;
          if (i >= colours->ColorCount)
            throw io_error("decode_gif: colour index " + std::to_string(i) + " is outside the colour table of " +
                           std::to_string(colours->ColorCount));
          out[0] = colours->Colors[i].Red, out[1] = colours->Colors[i].Green, out[2] = colours->Colors[i].Blue;
        }
      }
    frames.push_back(canvas);
    transparent = -1;  // a graphic control extension holds for the one frame after it
    if (first) break;
  }
  if (frames.empty()) throw io_error("decode_gif: the file has no image");
  return frames;
}
}  // namespace detail

/// `tf.io.decode_gif(contents)`: every frame, (frames, height, width, 3), on the logical screen, each
/// drawn over the one before (its transparent pixels keeping what was there; zeros before the first).
/// As in TF, a frame's disposal method is not applied: the next frame is drawn over it as it is.
/// `decode_image` takes the first alone, as TF's `expand_animations=False` does.
inline tensor decode_gif(std::span<const unsigned char> bytes) {
  detail::image_header h;
  const auto frames = detail::gif_frames(bytes, false, h);
  tensor t = zeros({frames.size(), h.height, h.width, 3});
  float* out = t.data();
  for (const auto& f : frames) out = std::copy(f.begin(), f.end(), out);
  return t;
}

/// `tf.io.decode_image(contents, channels=0, expand_animations=False)`: PNG, JPEG, BMP or GIF (its first
/// frame, RGB) by the file's signature. (Channels 0, 1, 3 or 4; PNG's also 2.)
inline tensor decode_image(std::span<const unsigned char> bytes, int channels = 0) {
  if (bytes.size() >= 2 && bytes[0] == 'B' && bytes[1] == 'M') return decode_bmp(bytes, channels);
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GIF8", 4) == 0) {
    detail::check_channels("decode_image", channels, {0, 1, 3, 4});
    detail::image_header h;
    return detail::rgb_image(h, detail::gif_frames(bytes, true, h).front().data(), channels);
  }
  if (bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0) return decode_png(bytes, channels);
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    if (channels == 4) {  // RGB, then an opaque alpha (as TF adds one)
      const tensor rgb = decode_jpeg(bytes, 3);
      const std::size_t n = rgb.size() / 3;
      tensor out = zeros({rgb.shape()[0], rgb.shape()[1], 4});
      for (std::size_t i = 0; i < n; ++i) {
        std::copy_n(rgb.data() + 3 * i, 3, out.data() + 4 * i);
        out.data()[4 * i + 3] = 255.0f;
      }
      return out;
    }
    return decode_jpeg(bytes, channels);
  }
  throw io_error("decode_image: not a PNG, JPEG, BMP or GIF file (unknown signature)");
}

/// `tf.io.read_file` + `decode_image`: the file's image; errors name the file.
inline tensor read_image(const std::string& path, int channels = 0) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw io_error("read_image: cannot open " + path);
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(f.tellg());
  if (size > max_image_bytes.load())
    throw io_error("read_image: " + path + " is over the cap of " + std::to_string(max_image_bytes.load()) + " bytes (max_image_bytes)");
  std::vector<unsigned char> bytes(size);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
  if (!f) throw io_error("read_image: cannot read " + path);
  try {
    return decode_image(bytes, channels);
  } catch (const io_error& e) {
    throw io_error(path + ": " + e.what());
  }
}

/// `tf.image.resize`'s methods here.
enum class interpolation { bilinear, nearest };

/// How `resize` treats an image of another aspect ratio than its target: stretch it (the default),
/// `crop` it first to its largest centred window of the target's ratio (Keras' `crop_to_aspect_ratio`),
/// or `pad` it first with zeros on both sides of one axis (Keras' `pad_to_aspect_ratio`).
enum class aspect_ratio { stretch, crop, pad };

namespace detail {
/// The image cropped or padded to the aspect ratio of height x width, with Keras' arithmetic (its
/// centred window rounded down; its padding the same on both sides).
inline tensor to_aspect_ratio(const tensor& image, std::size_t height, std::size_t width, aspect_ratio a) {
  const std::size_t ih = image.shape()[0], iw = image.shape()[1], c = image.shape()[2];
  std::size_t oh = ih, ow = iw, top = 0, left = 0;  // the output's size; where the input's [0, 0] goes (pad) or comes from (crop)
  if (a == aspect_ratio::crop) {
    oh = std::max<std::size_t>(std::min(ih, std::size_t(double(iw * height) / double(width))), 1);
    ow = std::max<std::size_t>(std::min(iw, std::size_t(double(ih * width) / double(height))), 1);
    top = std::size_t(double(ih - oh) / 2), left = std::size_t(double(iw - ow) / 2);
  } else {
    top = std::size_t(double(std::max(ih, std::size_t(double(iw * height) / double(width))) - ih) / 2);
    left = std::size_t(double(std::max(iw, std::size_t(double(ih * width) / double(height))) - iw) / 2);
    if (top > 0) oh = ih + 2 * top, left = 0;
    else if (left > 0) ow = iw + 2 * left;
  }
  tensor out = zeros({oh, ow, c});
  const bool crop = a == aspect_ratio::crop;
  for (std::size_t y = 0; y < (crop ? oh : ih); ++y) {
    const float* from = image.data() + ((crop ? y + top : y) * iw + (crop ? left : 0)) * c;
    float* to = out.data() + ((crop ? y : y + top) * ow + (crop ? 0 : left)) * c;
    std::copy(from, from + (crop ? ow : iw) * c, to);
  }
  return out;
}
}  // namespace detail

/// `tf.image.resize(image, (height, width), method)` (antialias off) of an (h, w, c) image: the sample
/// points at half-pixel centres, in = (out + 0.5) * in_size / out_size - 0.5, clamped at the edges.
/// With `aspect_ratio::crop` or `pad` the image is first cropped or padded to the target's aspect ratio.
inline tensor resize(const tensor& image, std::size_t height, std::size_t width, interpolation method = interpolation::bilinear,
                     aspect_ratio ratio = aspect_ratio::stretch) {
  if (image.dimension() != 3) throw shape_error("resize: an image of shape " + shape_str(image.shape()) + ", not (height, width, channels)");
  if (height == 0 || width == 0) throw value_error("resize: a size of " + std::to_string(height) + " x " + std::to_string(width));
  if (ratio != aspect_ratio::stretch && image.size() > 0)
    return resize(detail::to_aspect_ratio(image, height, width, ratio), height, width, method);
  const std::size_t ih = image.shape()[0], iw = image.shape()[1], c = image.shape()[2];
  tensor out = zeros({height, width, c});
  const float sy = float(ih) / float(height), sx = float(iw) / float(width);
  const float* in = image.data();
  auto at = [&](std::size_t y, std::size_t x) { return in + (y * iw + x) * c; };
  struct weight {
    std::size_t lo, hi;
    float frac;
  };
  auto weights = [](std::size_t n, std::size_t in_n, float scale) {
    std::vector<weight> w(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float p = (float(i) + 0.5f) * scale - 0.5f, f = std::floor(p);
      w[i] = {std::size_t(std::max(f, 0.0f)), std::min(std::size_t(std::max(std::ceil(p), 0.0f)), in_n - 1), p - f};
    }
    return w;
  };
  if (method == interpolation::nearest) {
    for (std::size_t y = 0; y < height; ++y)
      for (std::size_t x = 0; x < width; ++x) {
        const std::size_t py = std::min(std::size_t(std::floor((float(y) + 0.5f) * sy)), ih - 1);
        const std::size_t px = std::min(std::size_t(std::floor((float(x) + 0.5f) * sx)), iw - 1);
        std::copy_n(at(py, px), c, out.data() + (y * width + x) * c);
      }
    return out;
  }
  const std::vector<weight> wy = weights(height, ih, sy), wx = weights(width, iw, sx);
  for (std::size_t y = 0; y < height; ++y)
    for (std::size_t x = 0; x < width; ++x)
      for (std::size_t k = 0; k < c; ++k) {
        const float tl = at(wy[y].lo, wx[x].lo)[k], tr = at(wy[y].lo, wx[x].hi)[k];
        const float bl = at(wy[y].hi, wx[x].lo)[k], br = at(wy[y].hi, wx[x].hi)[k];
        const float top = tl + (tr - tl) * wx[x].frac, bottom = bl + (br - bl) * wx[x].frac;
        out.data()[(y * width + x) * c + k] = top + (bottom - top) * wy[y].frac;
      }
  return out;
}

/// keras.utils.image_dataset_from_directory's arguments.
struct image_directory_options {
  /// Keras' `labels`: empty is "inferred" (one class per subfolder); else a label per image file under the
  /// folder (subfolders or not), in the order Keras walks them: a folder's files by name, then its
  /// subfolders' by name, depth first. (`labels=None` is the `no_labels` overload.)
  std::vector<int> labels{};
  std::string label_mode = "int";         ///< "int", "categorical" (one-hot) or "binary" (two classes, 0 / 1)
  std::vector<std::string> class_names{};  ///< the subfolders to use, in label order (default: all, sorted)
  std::string color_mode = "rgb";          ///< "rgb", "rgba" or "grayscale"
  std::size_t batch_size = 32;
  std::size_t image_size[2] = {256, 256};  ///< (height, width) every image is resized to
  bool shuffle = true;
  std::optional<std::uint64_t> seed{};  ///< needed with shuffle and validation_split
  std::optional<float> validation_split{};
  std::string subset{};  ///< with validation_split: "training" or "validation"
  interpolation method = interpolation::bilinear;
  bool crop_to_aspect_ratio = false;  ///< resize without distortion: crop to the largest centred window first
  bool pad_to_aspect_ratio = false;   ///< resize without distortion: pad with zeros first
  bool verbose = true;  ///< prints "Found N files belonging to C classes." as Keras does
};

/// Keras' `labels=None`: `image_dataset_from_directory(directory, no_labels, options)` yields images only.
struct no_labels_t {};
inline constexpr no_labels_t no_labels{};

/// The image files of a folder, each decoded and resized when read: with `Labelled`, the element is an
/// example of an (h, w, c) image and its label, else the image alone. Made by
/// `image_dataset_from_directory`.
template <bool Labelled>
class basic_image_files {
 public:
  using element_type = std::conditional_t<Labelled, example, tensor>;
  struct file {
    std::string path;
    std::size_t label;
  };
  basic_image_files(std::shared_ptr<const std::vector<file>> files, std::size_t classes, image_directory_options o)
      : files_(std::move(files)), classes_(classes), o_(std::move(o)) {}
  std::int64_t cardinality() const { return std::int64_t(files_->size()); }
  data::options options() const { return {}; }
  const std::vector<file>& files() const { return *files_; }

  class iterator;
  iterator iterate(std::uint64_t) const;

 private:
  std::shared_ptr<const std::vector<file>> files_;
  std::size_t classes_;
  image_directory_options o_;
};

template <bool Labelled>
class basic_image_files<Labelled>::iterator {
 public:
  explicit iterator(const basic_image_files* s) : s_(*s) {}
  std::optional<element_type> next() {
    if (i_ >= s_.files_->size()) return std::nullopt;
    const file& f = (*s_.files_)[i_++];
    const int channels = s_.o_.color_mode == "grayscale" ? 1 : s_.o_.color_mode == "rgba" ? 4 : 3;
    const aspect_ratio ratio = s_.o_.crop_to_aspect_ratio ? aspect_ratio::crop
                               : s_.o_.pad_to_aspect_ratio ? aspect_ratio::pad
                                                           : aspect_ratio::stretch;
    tensor image = resize(read_image(f.path, channels), s_.o_.image_size[0], s_.o_.image_size[1], s_.o_.method, ratio);
    if constexpr (!Labelled) return image;
    tensor label;
    if (s_.o_.label_mode == "categorical") {
      label = zeros(extents{s_.classes_});
      label.data()[f.label] = 1.0f;
    } else {
      label = zeros(extents(s_.o_.label_mode == "binary" ? 1 : 0, 1));
      label.data()[0] = float(f.label);
    }
    if constexpr (Labelled) return example{std::move(image), std::move(label)};
  }
  std::int64_t skip(std::int64_t n) {
    const auto k = std::min<std::int64_t>(n, std::int64_t(s_.files_->size() - i_));
    i_ += std::size_t(k);
    return k;
  }

 private:
  basic_image_files s_;
  std::size_t i_ = 0;
};
template <bool Labelled>
typename basic_image_files<Labelled>::iterator basic_image_files<Labelled>::iterate(std::uint64_t) const {
  return iterator(this);
}
using image_files = basic_image_files<true>;

namespace detail {
/// The image files under `folder` (Keras' formats: .png, .jpg, .jpeg, .bmp, .gif) in the order Keras'
/// os.walk gives them: the folder's own files by name, then each subfolder's, by name, depth first.
inline std::vector<std::string> image_files_under(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(folder)) {
    if (e.is_directory()) {
      folders.push_back(e.path());
      continue;
    }
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp" || ext == ".gif") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::sort(folders.begin(), folders.end());
  for (const auto& f : folders)
    for (auto& p : image_files_under(f)) files.push_back(std::move(p));
  return files;
}

/// image_dataset_from_directory's files, labels and class count, checked, shuffled once and split.
template <bool Labelled>
std::pair<std::shared_ptr<std::vector<typename basic_image_files<Labelled>::file>>, std::size_t> image_directory(
    const std::string& directory, const image_directory_options& o) {
  namespace fs = std::filesystem;
  const std::string what = "image_dataset_from_directory";
  if (o.label_mode != "int" && o.label_mode != "categorical" && o.label_mode != "binary")
    throw value_error(what + ": label_mode \"" + o.label_mode + "\" is not \"int\", \"categorical\" or \"binary\"");
  if (o.color_mode != "rgb" && o.color_mode != "rgba" && o.color_mode != "grayscale")
    throw value_error(what + ": color_mode \"" + o.color_mode + "\" is not \"rgb\", \"rgba\" or \"grayscale\"");
  if (o.crop_to_aspect_ratio && o.pad_to_aspect_ratio)
    throw value_error(what + ": only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be set");
  if (o.batch_size == 0 || o.image_size[0] == 0 || o.image_size[1] == 0)
    throw value_error(what + ": batch_size and image_size must be positive");
  if (o.validation_split && !(*o.validation_split > 0.0f && *o.validation_split < 1.0f))
    throw value_error(what + ": validation_split " + std::to_string(*o.validation_split) + " is not between 0 and 1");
  if (o.validation_split && o.subset != "training" && o.subset != "validation")
    throw value_error(what + ": with validation_split, subset must be \"training\" or \"validation\", not \"" + o.subset + "\"");
  if (!o.validation_split && !o.subset.empty()) throw value_error(what + ": subset \"" + o.subset + "\" needs validation_split");
  if (o.validation_split && o.shuffle && !o.seed)
    throw value_error(what + ": with validation_split and shuffle, give a seed (so that the two subsets do not overlap)");
  if (!Labelled && !o.labels.empty()) throw value_error(what + ": labels given with no_labels");
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) throw io_error(what + ": " + directory + " is not a folder");
  auto files = std::make_shared<std::vector<typename basic_image_files<Labelled>::file>>();
  std::size_t classes = 0;
  const bool inferred = Labelled && o.labels.empty();
  if (inferred) {
    std::vector<std::string> names = o.class_names;
    if (names.empty()) {
      for (const auto& e : fs::directory_iterator(directory))
        if (e.is_directory()) names.push_back(e.path().filename().string());
      std::sort(names.begin(), names.end());
    }
    if (names.empty()) throw io_error(what + ": " + directory + " has no class subfolders");
    for (std::size_t c = 0; c < names.size(); ++c) {
      const fs::path folder = fs::path(directory) / names[c];
      if (!fs::is_directory(folder, ec)) throw io_error(what + ": class " + names[c] + " has no folder " + folder.string());
      for (auto& p : image_files_under(folder)) files->push_back({std::move(p), c});
    }
    classes = names.size();
    if (o.verbose) std::printf("Found %zu files belonging to %zu classes.\n", files->size(), classes);
  } else {  // every image under the folder, labelled by the list (or not at all)
    if (!o.class_names.empty()) throw value_error(what + ": class_names needs labels inferred from the subfolders");
    auto found = image_files_under(directory);
    if (Labelled && found.size() != o.labels.size())
      throw value_error(what + ": " + std::to_string(o.labels.size()) + " labels for the " + std::to_string(found.size()) +
                        " image files under " + directory + " (one label a file)");
    for (std::size_t i = 0; i < found.size(); ++i) {
      const int label = Labelled ? o.labels[i] : 0;
      if (label < 0) throw value_error(what + ": label " + std::to_string(label) + " of " + found[i] + " is negative");
      classes = std::max(classes, std::size_t(label) + 1);
      files->push_back({std::move(found[i]), std::size_t(label)});
    }
    if (o.verbose) std::printf("Found %zu files.\n", files->size());
  }
  if (Labelled && o.label_mode == "binary" && classes != 2)
    throw value_error(what + ": label_mode \"binary\" needs 2 classes, " + directory + " has " + std::to_string(classes));
  if (files->empty()) throw io_error(what + ": no images in " + directory + " (.png, .jpg, .jpeg, .bmp, .gif)");
  if (o.shuffle) {  // once, with the seed: both subsets see the same order
    rng r(o.seed.value_or(default_seed));
    for (std::size_t i = files->size(); i > 1; --i) std::swap((*files)[i - 1], (*files)[r.below(i)]);
  }
  if (o.validation_split) {
    const auto val = std::size_t(*o.validation_split * float(files->size()));
    if (o.subset == "training") files->resize(files->size() - val);
    else files->erase(files->begin(), files->end() - std::ptrdiff_t(val));
    if (o.verbose) std::printf("Using %zu files for %s.\n", files->size(), o.subset.c_str());
    if (files->empty()) throw value_error(what + ": the " + o.subset + " subset has no files");
  }
  return {std::move(files), classes};
}

template <bool Labelled>
auto image_dataset(const std::string& directory, image_directory_options o) {
  auto [files, classes] = image_directory<Labelled>(directory, o);
  const std::size_t batch_size = o.batch_size, buffer = o.shuffle ? 8 * o.batch_size : 1;
  const std::uint64_t seed = o.seed.value_or(default_seed);
  return basic_image_files<Labelled>(std::move(files), classes, std::move(o)) | shuffle(buffer, seed) | batch(batch_size);
}
}  // namespace detail

/// `keras.utils.image_dataset_from_directory(directory, ...)`: the .png, .jpg and .jpeg files under each
/// class subfolder (searched to any depth, in the order Keras walks them), labelled by the subfolder's
/// index among the classes, or (`labels`) every image file under the folder labelled by the list; the
/// file list shuffled once (with the seed) before a validation split takes its last fraction; then, as
/// Keras, `shuffle(8 * batch_size, seed)` (when shuffle) and `batch(batch_size)`. Images are decoded with
/// `color_mode`'s channels and resized to `image_size` as they are read.
inline auto image_dataset_from_directory(const std::string& directory, image_directory_options o = {}) {
  return detail::image_dataset<true>(directory, std::move(o));
}
/// `image_dataset_from_directory(directory, labels=None, ...)`: every image file under the folder, as
/// images alone (for `predict`).
inline auto image_dataset_from_directory(const std::string& directory, no_labels_t, image_directory_options o = {}) {
  return detail::image_dataset<false>(directory, std::move(o));
}

}  // namespace dtrain::data
