#pragma once
/// \file
/// TFRecord files and `tf.train.Example` records:
/// - `tfrecord_dataset(files, compression_type)`: `tf.data.TFRecordDataset`, a dataset of the files'
///   records (std::string), in file order; every record's length and data CRC-32C (masked) is checked,
///   and a record that does not fit, ends early or fails its checksum is an `io_error` naming the file and
///   the record's offset. "GZIP" and "ZLIB" files are read through zlib.
/// - `parse_single_example(record, features)`: `tf.io.parse_single_example` with `fixed_len_feature`s
///   (`tf.io.FixedLenFeature(shape, dtype, default_value)`): each feature's values as a tensor of its
///   shape (float32 and int64 lists, int64 as floats, exact to 2^24), bytes lists as strings, and
///   `var_len_feature`s (`tf.io.VarLenFeature(dtype)`: however many values there are, 1-D).
/// - `parse_single_sequence_example(record, context_features, sequence_features)`:
///   `tf.io.parse_single_sequence_example` of a `tf.train.SequenceExample`, its feature lists with
///   `fixed_len_sequence_feature`s (`tf.io.FixedLenSequenceFeature`) as (steps, shape...) tensors and
///   `var_len_feature`s as their steps' values with each step's length (TF's SparseTensor).
/// - `tfrecord_writer(path, compression_type)`: `tf.io.TFRecordWriter`, records framed as TensorFlow
///   frames them, the file put in place whole by `close()`; `serialize_example(features)`:
///   `tf.train.Example(...).SerializeToString()` of float, int64 and bytes lists;
///   `serialize_sequence_example(context, feature_lists)`: `tf.train.SequenceExample`'s.
///
/// The Example protobuf is read by a decoder of the wire format for its few messages here rather than
/// through libprotobuf's generated code: a header-only library cannot ship that, and the schema
/// (Example { Features features = 1 }, Features { map<string, Feature> feature = 1 }, Feature { oneof:
/// BytesList bytes_list = 1, FloatList float_list = 2, Int64List int64_list = 3 }; SequenceExample's
/// FeatureLists of FeatureList) has been fixed since TensorFlow 1.0. Unknown fields are skipped, as
/// protobuf does.

#include <zlib.h>

#include <concepts>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dtrain/core/crc32c.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

/// The longest record a TFRecord file may hold here: a length above it is a damaged file, not a reason
/// to allocate.
inline constexpr std::uint64_t max_record_bytes = std::uint64_t(1) << 30;

namespace detail {
/// One TFRecord file, read record by record (through zlib for GZIP and ZLIB files).
class tfrecord_reader {
 public:
  tfrecord_reader(std::string path, const std::string& compression) : path_(std::move(path)) {
    if (compression == "GZIP" || compression == "ZLIB") {
      // gzopen reads gzip streams; a raw zlib stream is inflated here instead
      zlib_ = compression == "ZLIB";
      if (zlib_) {
        plain_ = std::fopen(path_.c_str(), "rb");
        if (!plain_) throw io_error("tfrecord_dataset: cannot open " + path_);
        if (inflateInit(&z_) != Z_OK) throw io_error("tfrecord_dataset: zlib failed to start for " + path_);
        inflating_ = true;
      } else {
        gz_ = gzopen(path_.c_str(), "rb");
        if (!gz_) throw io_error("tfrecord_dataset: cannot open " + path_);
      }
    } else if (compression.empty()) {
      plain_ = std::fopen(path_.c_str(), "rb");
      if (!plain_) throw io_error("tfrecord_dataset: cannot open " + path_);
    } else {
      throw value_error("tfrecord_dataset: compression_type \"" + compression + "\" is not \"\", \"GZIP\" or \"ZLIB\"");
    }
  }
  tfrecord_reader(const tfrecord_reader&) = delete;
  tfrecord_reader& operator=(const tfrecord_reader&) = delete;
  ~tfrecord_reader() {
    if (gz_) gzclose(gz_);
    if (plain_) std::fclose(plain_);
    if (inflating_) inflateEnd(&z_);
  }

  /// The next record (into `out`), or false at the end of the file. `want_data`: false skips the data
  /// (its checksum unchecked), for a resumed iterator.
  bool next(std::string& out, bool want_data = true) {
    unsigned char head[12];
    const std::size_t got = read(head, 12);
    if (got == 0) return false;
    if (got < 12) fail("ends inside a record's header");
    std::uint64_t length = 0;
    std::uint32_t length_crc = 0;
    std::memcpy(&length, head, 8);
    std::memcpy(&length_crc, head + 8, 4);
    if (dtrain::detail::masked_crc32c(head, 8) != length_crc) fail("has a record whose length fails its checksum (a damaged file?)");
    if (length > max_record_bytes)
      fail("has a record of " + std::to_string(length) + " bytes, over the cap of " + std::to_string(max_record_bytes));
    out.clear();  // grown as the data comes: a file that ends early costs no more than its own size
    for (std::size_t left = std::size_t(length); left > 0;) {
      const std::size_t at = out.size(), chunk = std::min<std::size_t>(left, std::size_t(1) << 20);
      out.resize(at + chunk);
      if (read(reinterpret_cast<unsigned char*>(out.data() + at), chunk) < chunk) fail("ends inside a record");
      left -= chunk;
    }
    std::uint32_t data_crc = 0;
    if (read(reinterpret_cast<unsigned char*>(&data_crc), 4) < 4) fail("ends inside a record's checksum");
    if (want_data && dtrain::detail::masked_crc32c(out.data(), out.size()) != data_crc) fail("has a record whose data fails its checksum");
    offset_ += 16 + length;
    return true;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw io_error("tfrecord_dataset: " + path_ + " " + what + " (the record at byte " + std::to_string(offset_) + ")");
  }
  std::size_t read(unsigned char* p, std::size_t n) {
    if (gz_) {
      std::size_t total = 0;
      while (total < n) {
        const int r = gzread(gz_, p + total, unsigned(std::min<std::size_t>(n - total, 1u << 30)));
        if (r < 0) fail("is not a readable gzip file");
        if (r == 0) break;
        total += std::size_t(r);
      }
      return total;
    }
    if (!zlib_) return std::fread(p, 1, n, plain_);
    std::size_t total = 0;  // a raw zlib stream
    while (total < n) {
      if (z_.avail_in == 0 && !ended_) {
        z_.avail_in = unsigned(std::fread(in_, 1, sizeof in_, plain_));
        z_.next_in = in_;
        if (z_.avail_in == 0) break;
      }
      if (ended_) break;
      z_.next_out = p + total;
      z_.avail_out = unsigned(std::min<std::size_t>(n - total, 1u << 30));
      const std::size_t before = z_.avail_out;
      const int r = inflate(&z_, Z_NO_FLUSH);
      total += before - z_.avail_out;
      if (r == Z_STREAM_END) ended_ = true;
      else if (r != Z_OK && r != Z_BUF_ERROR) fail("is not a readable zlib stream");
    }
    return total;
  }
  std::string path_;
  gzFile gz_ = nullptr;
  std::FILE* plain_ = nullptr;
  bool zlib_ = false, inflating_ = false, ended_ = false;
  z_stream z_{};
  unsigned char in_[1 << 16];
  std::uint64_t offset_ = 0;
};
}  // namespace detail

/// `tf.data.TFRecordDataset(filenames, compression_type)`: the records of each file in turn (one file:
/// `tfrecord_dataset({"train.tfrecord"})`).
class tfrecord_dataset {
 public:
  using element_type = std::string;
  explicit tfrecord_dataset(std::vector<std::string> files, std::string compression_type = "")
      : files_(std::make_shared<const std::vector<std::string>>(std::move(files))), compression_(std::move(compression_type)) {
    if (files_->empty()) throw value_error("tfrecord_dataset: no files");
    if (!compression_.empty() && compression_ != "GZIP" && compression_ != "ZLIB")
      throw value_error("tfrecord_dataset: compression_type \"" + compression_ + "\" is not \"\", \"GZIP\" or \"ZLIB\"");
  }
  std::int64_t cardinality() const { return unknown; }
  data::options options() const { return {}; }

  class iterator {
   public:
    explicit iterator(const tfrecord_dataset& d) : files_(d.files_), compression_(d.compression_) {}
    std::optional<std::string> next() {
      std::string out;
      return advance(out, true) ? std::optional<std::string>(std::move(out)) : std::nullopt;
    }
    std::int64_t skip(std::int64_t n) {
      std::string scratch;
      std::int64_t k = 0;
      while (k < n && advance(scratch, false)) ++k;
      return k;
    }

   private:
    bool advance(std::string& out, bool want_data) {
      while (file_ < files_->size()) {
        if (!reader_) reader_ = std::make_unique<detail::tfrecord_reader>((*files_)[file_], compression_);
        if (reader_->next(out, want_data)) return true;
        reader_.reset();
        ++file_;
      }
      return false;
    }
    std::shared_ptr<const std::vector<std::string>> files_;
    std::string compression_;
    std::size_t file_ = 0;
    std::unique_ptr<detail::tfrecord_reader> reader_;
  };
  iterator iterate(std::uint64_t) const { return iterator(*this); }

 private:
  std::shared_ptr<const std::vector<std::string>> files_;
  std::string compression_;
};

/// `tf.io.FixedLenFeature(shape, dtype, default_value)`'s dtypes here.
enum class feature_dtype { float32, int64, string };

/// `tf.io.FixedLenFeature`: exactly the values of `shape` (a scalar: {}), or the default when the record
/// lacks the feature.
struct fixed_len_feature {
  extents shape{};
  feature_dtype dtype = feature_dtype::float32;
  std::optional<std::vector<float>> default_value{};  ///< float32 and int64 features
};

/// `tf.io.VarLenFeature(dtype)`: however many values the record holds (none when it lacks the feature),
/// as a 1-D tensor (or strings): the values of TF's SparseTensor, whose indices for one example are
/// 0..n-1.
struct var_len_feature {
  feature_dtype dtype = feature_dtype::float32;
};

/// A feature of an Example (or of a SequenceExample's context) to parse: fixed or variable length.
using feature_spec = std::variant<fixed_len_feature, var_len_feature>;

/// `tf.io.FixedLenSequenceFeature(shape, dtype, allow_missing)`: a SequenceExample's feature list, each
/// step exactly `shape`'s values; parsed as a tensor (steps, shape...). A missing list is an error, or
/// with `allow_missing` zero steps.
struct fixed_len_sequence_feature {
  extents shape{};
  feature_dtype dtype = feature_dtype::float32;
  bool allow_missing = false;
};

/// A feature list of a SequenceExample to parse: each step of fixed length, or of however many values it
/// has (`tf.io.VarLenFeature` among TF's sequence_features).
using sequence_feature_spec = std::variant<fixed_len_sequence_feature, var_len_feature>;

/// What `parse_single_example` returns: the numeric features as tensors, the string ones as bytes.
struct parsed_example {
  std::map<std::string, tensor> tensors;
  std::map<std::string, std::vector<std::string>> strings;
};

namespace detail {
/// A reader of protobuf's wire format over one message's bytes; every read is bounds-checked.
struct proto_reader {
  std::string_view data;
  const char* message = "parse_single_example: not a tf.train.Example";  // what a damaged message is
  std::size_t at = 0;
  bool done() const { return at >= data.size(); }
  /// A reader of a field of this message (the same error message).
  proto_reader inner() { return {bytes(), message}; }
  [[noreturn]] void fail(const std::string& what) const { throw io_error(std::string(message) + " (" + what + ")"); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= data.size()) fail("a varint runs past the end");
      const auto b = static_cast<unsigned char>(data[at++]);
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint of more than 10 bytes");
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (n > data.size() - at) fail("a field of " + std::to_string(n) + " bytes runs past the end");
    const std::string_view out = data.substr(at, std::size_t(n));
    at += std::size_t(n);
    return out;
  }
  /// Skips a field of this wire type (an unknown field).
  void skip(std::uint64_t wire) {
    if (wire == 0) varint();
    else if (wire == 1) advance(8);
    else if (wire == 2) bytes();
    else if (wire == 5) advance(4);
    else fail("wire type " + std::to_string(wire));
  }
  void advance(std::size_t n) {
    if (n > data.size() - at) fail("a fixed field runs past the end");
    at += n;
  }
};

/// One Feature: its kind (1 bytes, 2 float, 3 int64; 0 none) and values.
struct feature_values {
  int kind = 0;
  std::vector<float> numbers;
  std::vector<std::string> strings;
};
inline feature_values parse_feature(proto_reader r) {
  feature_values f;
  while (!r.done()) {
    const std::uint64_t key = r.varint(), field = key >> 3, wire = key & 7;
    if ((field < 1 || field > 3) || wire != 2) {
      r.skip(wire);
      continue;
    }
    f.kind = int(field);  // the last of a oneof wins, as protobuf has it
    f.numbers.clear(), f.strings.clear();
    proto_reader list = r.inner();
    while (!list.done()) {
      const std::uint64_t k = list.varint(), wt = k & 7;
      if ((k >> 3) != 1) {
        list.skip(wt);
        continue;
      }
      if (field == 1) {
        if (wt != 2) list.fail("a bytes value of wire type " + std::to_string(wt));
        f.strings.emplace_back(list.bytes());
      } else if (field == 2) {
        if (wt == 5) {  // one float
          float v;
          list.advance(4);
          std::memcpy(&v, list.data.data() + list.at - 4, 4);
          f.numbers.push_back(v);
        } else if (wt == 2) {  // packed
          const std::string_view p = list.bytes();
          if (p.size() % 4) list.fail("a packed float list of " + std::to_string(p.size()) + " bytes");
          for (std::size_t i = 0; i < p.size(); i += 4) {
            float v;
            std::memcpy(&v, p.data() + i, 4);
            f.numbers.push_back(v);
          }
        } else {
          list.fail("a float value of wire type " + std::to_string(wt));
        }
      } else {
        if (wt == 0) {
          f.numbers.push_back(float(std::int64_t(list.varint())));
        } else if (wt == 2) {
          proto_reader packed = list.inner();
          while (!packed.done()) f.numbers.push_back(float(std::int64_t(packed.varint())));
        } else {
          list.fail("an int64 value of wire type " + std::to_string(wt));
        }
      }
    }
  }
  return f;
}
/// The entries (key = 1, value = 2) of the map field 1 of message `r`, each value read by `value`; the
/// last entry of a key wins (protobuf's rule). Features and FeatureLists are such messages.
template <class Value, class Read>
std::map<std::string, Value> parse_map(proto_reader r, Read value) {
  std::map<std::string, Value> out;
  while (!r.done()) {
    const std::uint64_t k = r.varint();
    if (k != ((1u << 3) | 2)) {
      r.skip(k & 7);
      continue;
    }
    proto_reader entry = r.inner();
    std::string name;
    Value v{};
    while (!entry.done()) {
      const std::uint64_t e = entry.varint();
      if (e == ((1u << 3) | 2)) name = std::string(entry.bytes());
      else if (e == ((2u << 3) | 2)) v = value(entry.inner());
      else entry.skip(e & 7);
    }
    out[name] = std::move(v);
  }
  return out;
}
inline std::map<std::string, feature_values> parse_feature_map(proto_reader features) {
  return parse_map<feature_values>(features, parse_feature);
}
/// Example { Features features = 1 }: its features.
inline std::map<std::string, feature_values> parse_features(std::string_view record) {
  std::map<std::string, feature_values> out;
  proto_reader example{record};
  while (!example.done()) {
    const std::uint64_t key = example.varint();
    if (key != ((1u << 3) | 2)) example.skip(key & 7);
    else for (auto& [k, v] : parse_feature_map(example.inner())) out[k] = std::move(v);  // a repeated field merges
  }
  return out;
}
}  // namespace detail

namespace detail {
inline constexpr const char* feature_kinds[] = {"no values", "a bytes_list", "a float_list", "an int64_list"};
inline int kind_of(feature_dtype d) { return d == feature_dtype::string ? 1 : d == feature_dtype::float32 ? 2 : 3; }
inline std::size_t count_of(const extents& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}
/// The values of `v`, found for feature `name`, into `out` as a tensor of `shape` (or strings), after
/// checking their kind; `count` values were expected (any number when `count` is nullopt).
inline void take_values(parsed_example& out, const std::string& name, const feature_values& v, feature_dtype dtype,
                        extents shape, std::optional<std::size_t> count, const char* what) {
  const int want = kind_of(dtype);
  if (v.kind != want && v.kind != 0)
    throw value_error(std::string(what) + ": feature '" + name + "' is " + feature_kinds[v.kind] + ", not " + feature_kinds[want]);
  const std::size_t have = want == 1 ? v.strings.size() : v.numbers.size();
  if (count && have != *count)
    throw value_error(std::string(what) + ": feature '" + name + "' has " + std::to_string(have) + " values, shape " +
                      shape_str(shape) + " needs " + std::to_string(*count));
  if (want == 1) {
    out.strings[name] = v.strings;
  } else {
    if (!count) shape = {have};
    tensor t = zeros(shape);
    std::copy(v.numbers.begin(), v.numbers.end(), t.data());
    out.tensors.insert_or_assign(name, std::move(t));
  }
}
/// The features `specs` names, from the parsed `found`.
inline parsed_example take_features(const std::map<std::string, feature_values>& found,
                                    const std::map<std::string, feature_spec>& specs, const char* what) {
  parsed_example out;
  for (const auto& [name, spec] : specs) {
    const auto it = found.find(name);
    const bool missing = it == found.end() || it->second.kind == 0;
    if (const auto* var = std::get_if<var_len_feature>(&spec)) {
      take_values(out, name, missing ? feature_values{} : it->second, var->dtype, {}, std::nullopt, what);
      continue;
    }
    const auto& fixed = std::get<fixed_len_feature>(spec);
    const std::size_t n = count_of(fixed.shape);
    if (missing) {
      if (fixed.dtype == feature_dtype::string || !fixed.default_value)
        throw value_error(std::string(what) + ": feature '" + name + "' is missing and has no default_value");
      if (fixed.default_value->size() != n && fixed.default_value->size() != 1)
        throw value_error(std::string(what) + ": feature '" + name + "' has a default_value of " +
                          std::to_string(fixed.default_value->size()) + " values for shape " + shape_str(fixed.shape));
      tensor t = zeros(fixed.shape);
      for (std::size_t i = 0; i < n; ++i) t.data()[i] = (*fixed.default_value)[fixed.default_value->size() == 1 ? 0 : i];
      out.tensors.emplace(name, std::move(t));
      continue;
    }
    take_values(out, name, it->second, fixed.dtype, fixed.shape, n, what);
  }
  return out;
}
}  // namespace detail

/// `tf.io.parse_single_example(serialized, features)`: each named feature's values, a fixed-length one
/// checked against its dtype and shape (a missing one takes its default, else it is an error), a
/// variable-length one as a 1-D tensor (strings) of however many values the record has.
inline parsed_example parse_single_example(std::string_view serialized, const std::map<std::string, feature_spec>& features) {
  return detail::take_features(detail::parse_features(serialized), features, "parse_single_example");
}
inline parsed_example parse_single_example(std::string_view serialized, const std::map<std::string, fixed_len_feature>& features) {
  return parse_single_example(serialized, std::map<std::string, feature_spec>(features.begin(), features.end()));
}

/// What `parse_single_sequence_example` returns: the context's features and the feature lists, each list
/// a tensor (steps, shape...) or its steps' strings one after another. A variable-length list is its
/// steps' values one after another (1-D), and `lengths` says how many each step has: TF's SparseTensor,
/// whose values of step s sit at indices (s, 0..lengths[s]-1), dense_shape (steps, the longest).
struct parsed_sequence_example {
  parsed_example context;
  parsed_example feature_lists;
  std::map<std::string, std::vector<std::size_t>> lengths;
};

/// `tf.io.parse_single_sequence_example(serialized, context_features, sequence_features)` on a
/// `tf.train.SequenceExample` { Features context = 1; FeatureLists feature_lists = 2 } with
/// FeatureLists { map<string, FeatureList> feature_list = 1 }, FeatureList { repeated Feature feature = 1 }.
inline parsed_sequence_example parse_single_sequence_example(
    std::string_view serialized, const std::map<std::string, feature_spec>& context_features,
    const std::map<std::string, sequence_feature_spec>& sequence_features) {
  constexpr const char* what = "parse_single_sequence_example";
  using lists = std::map<std::string, std::vector<detail::feature_values>>;
  std::map<std::string, detail::feature_values> context;
  lists found;
  detail::proto_reader r{serialized, "parse_single_sequence_example: not a tf.train.SequenceExample"};
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    if (key == ((1u << 3) | 2)) {
      for (auto& [k, v] : detail::parse_feature_map(r.inner())) context[k] = std::move(v);
    } else if (key == ((2u << 3) | 2)) {
      auto steps = [](detail::proto_reader list) {  // FeatureList: its repeated Feature
        std::vector<detail::feature_values> out;
        while (!list.done()) {
          const std::uint64_t k = list.varint();
          if (k == ((1u << 3) | 2)) out.push_back(detail::parse_feature(list.inner()));
          else list.skip(k & 7);
        }
        return out;
      };
      for (auto& [k, v] : detail::parse_map<std::vector<detail::feature_values>>(r.inner(), steps)) found[k] = std::move(v);
    } else {
      r.skip(key & 7);
    }
  }
  parsed_sequence_example out{detail::take_features(context, context_features, what), {}, {}};
  for (const auto& [name, any] : sequence_features) {
    const auto it = found.find(name);
    const std::size_t steps = it == found.end() ? 0 : it->second.size();
    const auto* var = std::get_if<var_len_feature>(&any);
    const feature_dtype dtype = var ? var->dtype : std::get<fixed_len_sequence_feature>(any).dtype;
    detail::feature_values all{detail::kind_of(dtype), {}, {}};
    // each step checked alone, so that an error names it; returns how many values it has
    auto append = [&](std::size_t t, const extents& shape, std::optional<std::size_t> n) {
      parsed_example one;
      detail::take_values(one, name + "' step '" + std::to_string(t), it->second[t], dtype, shape, n, what);
      if (dtype == feature_dtype::string) {
        auto& v = one.strings.begin()->second;
        all.strings.insert(all.strings.end(), v.begin(), v.end());
        return v.size();
      }
      const tensor& v = one.tensors.begin()->second;
      all.numbers.insert(all.numbers.end(), v.data(), v.data() + v.size());
      return v.size();
    };
    if (var) {  // (a missing list is no steps, as in TF)
      auto& lengths = out.lengths[name];
      for (std::size_t t = 0; t < steps; ++t) lengths.push_back(append(t, {}, std::nullopt));
      detail::take_values(out.feature_lists, name, all, dtype, {}, std::nullopt, what);
      continue;
    }
    const auto& spec = std::get<fixed_len_sequence_feature>(any);
    if (it == found.end() && !spec.allow_missing)
      throw value_error(std::string(what) + ": feature list '" + name + "' is missing (allow_missing is off)");
    const std::size_t n = detail::count_of(spec.shape);
    for (std::size_t t = 0; t < steps; ++t) append(t, spec.shape, n);
    extents shape{steps};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    detail::take_values(out.feature_lists, name, all, spec.dtype, shape, steps * n, what);
  }
  return out;
}
/// (every list of fixed length; a template so that `{}` picks the overload above)
template <std::same_as<fixed_len_sequence_feature> Fixed>
parsed_sequence_example parse_single_sequence_example(std::string_view serialized,
                                                      const std::map<std::string, feature_spec>& context_features,
                                                      const std::map<std::string, Fixed>& sequence_features) {
  return parse_single_sequence_example(
      serialized, context_features,
      std::map<std::string, sequence_feature_spec>(sequence_features.begin(), sequence_features.end()));
}

/// `tf.io.TFRecordWriter(path, options)` with compression_type "", "GZIP" or "ZLIB": each record is its
/// length (u64 little endian), the length's masked CRC-32C, the data and the data's masked CRC-32C, as
/// TensorFlow writes them. The file is written under a temporary name and put in place whole by
/// `close()`, or by the destructor unless an exception is unwinding then (the file at `path` then stays
/// as it was): a failed conversion never leaves a truncated file behind.
class tfrecord_writer {
 public:
  explicit tfrecord_writer(const std::filesystem::path& path, const std::string& compression_type = "") : file_(path) {
    if (!compression_type.empty()) {
      if (compression_type != "GZIP" && compression_type != "ZLIB")
        throw value_error("tfrecord_writer: compression_type \"" + compression_type + "\" is not \"\", \"GZIP\" or \"ZLIB\"");
      z_.emplace(compression_type == "GZIP", "tfrecord_writer: " + path.string());
    }
  }
  tfrecord_writer(const tfrecord_writer&) = delete;
  tfrecord_writer& operator=(const tfrecord_writer&) = delete;
  ~tfrecord_writer() {
    if (open_ && std::uncaught_exceptions() <= unwinding_) try {
        close();
      } catch (...) {  // a destructor cannot report it; close() explicitly to see the error
      }
  }

  void write(std::string_view record) {
    if (!open_) throw usage_error("tfrecord_writer: write after close (" + file_.path().string() + ")");
    if (record.size() > max_record_bytes)
      throw value_error("tfrecord_writer: a record of " + std::to_string(record.size()) + " bytes for " +
                        file_.path().string() + " (readers refuse records over " + std::to_string(max_record_bytes) + ")");
    char head[12];
    const std::uint64_t n = record.size();
    std::memcpy(head, &n, 8);  // (little endian, as every machine dtrain runs on)
    const std::uint32_t length_crc = dtrain::detail::masked_crc32c(head, 8), data_crc = dtrain::detail::masked_crc32c(record.data(), record.size());
    std::memcpy(head + 8, &length_crc, 4);
    put({head, 12});
    put(record);
    put({reinterpret_cast<const char*>(&data_crc), 4});
  }
  /// Finishes the file and puts it in place (durably); an `io_error` if it cannot.
  void close() {
    if (!open_) return;
    open_ = false;
    if (z_) z_->finish(to_file{file_});
    file_.commit();
  }

 private:
  struct to_file {
    dtrain::detail::atomic_file& f;
    void operator()(std::span<const char> b) const { f.write(b); }
  };
  void put(std::string_view bytes) {
    if (z_) z_->put(bytes, to_file{file_});
    else file_.write(bytes);
  }
  dtrain::detail::atomic_file file_;
  std::optional<dtrain::detail::deflater> z_;  // GZIP, ZLIB
  bool open_ = true;
  int unwinding_ = std::uncaught_exceptions();  // exceptions in flight when it was made
};

/// A `tf.train.Feature`'s values: a FloatList, an Int64List or a BytesList.
using feature = std::variant<std::vector<float>, std::vector<std::int64_t>, std::vector<std::string>>;

namespace detail {
inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) out.push_back(char((v & 0x7f) | 0x80)), v >>= 7;
  out.push_back(char(v));
}
/// A length-delimited field (wire type 2).
inline void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_varint(out, (std::uint64_t(field) << 3) | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
}  // namespace detail

namespace detail {
/// A Feature message: float and int64 lists packed, as TensorFlow writes them.
inline std::string feature_message(const feature& values) {
  std::string list, packed;
  if (const auto* f = std::get_if<std::vector<float>>(&values)) {
    packed.append(reinterpret_cast<const char*>(f->data()), f->size() * sizeof(float));
  } else if (const auto* i = std::get_if<std::vector<std::int64_t>>(&values)) {
    for (std::int64_t v : *i) put_varint(packed, std::uint64_t(v));
  } else {
    for (const std::string& b : std::get<std::vector<std::string>>(values)) put_bytes(list, 1, b);
  }
  if (!packed.empty()) put_bytes(list, 1, packed);  // (an empty list has no field, as protobuf writes it)
  std::string out;
  put_bytes(out, int(values.index()) == 0 ? 2 : int(values.index()) == 1 ? 3 : 1, list);
  return out;
}
/// A map<string, V> field 1 of entries (key 1, value 2), each value's message by `message`, in key order.
template <class V, class Message>
std::string map_message(const std::map<std::string, V>& m, Message message) {
  std::string out;
  for (const auto& [name, v] : m) {
    std::string entry;
    put_bytes(entry, 1, name);
    put_bytes(entry, 2, message(v));
    put_bytes(out, 1, entry);
  }
  return out;
}
}  // namespace detail

/// `tf.train.Example(features=tf.train.Features(feature={name: feature, ...})).SerializeToString()`:
/// float and int64 lists packed, as TensorFlow writes them; the features in name order.
inline std::string serialize_example(const std::map<std::string, feature>& features) {
  std::string example;
  detail::put_bytes(example, 1, detail::map_message(features, detail::feature_message));
  return example;
}

/// `tf.train.SequenceExample(context=..., feature_lists=...).SerializeToString()`: the context's features
/// and, for each feature list, its steps' features in order.
inline std::string serialize_sequence_example(const std::map<std::string, feature>& context,
                                              const std::map<std::string, std::vector<feature>>& feature_lists) {
  std::string out;
  if (!context.empty()) detail::put_bytes(out, 1, detail::map_message(context, detail::feature_message));
  if (!feature_lists.empty())
    detail::put_bytes(out, 2, detail::map_message(feature_lists, [](const std::vector<feature>& steps) {
                        std::string list;
                        for (const feature& f : steps) detail::put_bytes(list, 1, detail::feature_message(f));
                        return list;
                      }));
  return out;
}

}  // namespace dtrain::data
