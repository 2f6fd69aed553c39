#pragma once
/// \file
/// Text for language models: `text_vectorization`, Keras' `TextVectorization(split="character",
/// standardize=None)` (a vocabulary of the characters of a text, most frequent first, behind Keras'
/// padding "" and out-of-vocabulary "[UNK]" entries), and `next_token_windows`, the source of
/// next-token prediction: windows of `sequence_length + 1` ids as (the first L, the last L), as TF's
/// text-generation tutorial makes with `batch(sequence_length + 1, drop_remainder=True)` and
/// `map(split_input_target)`. Windows are a source like `from_tensor_slices`: shuffled, batched and
/// sharded by the usual stages, and an iterator over them resumes by skipping without work.

#include <algorithm>
#include <functional>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain::data {

namespace detail {
/// The characters of UTF-8 text, each as its own UTF-8 bytes (what tf.strings.unicode_split gives);
/// a malformed sequence becomes U+FFFD, as its default errors="replace" does.
inline std::vector<std::string_view> utf8_characters(std::string_view s) {
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n > 1) {  // no overlong forms, surrogates or code points past U+10FFFF
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(n == 2 && b < 0xC2) && !(n == 3 && b == 0xE0 && b1 < 0xA0) && !(n == 3 && b == 0xED && b1 >= 0xA0) &&
           !(n == 4 && b == 0xF0 && b1 < 0x90) && !(n == 4 && (b > 0xF4 || (b == 0xF4 && b1 >= 0x90)));
    }
    out.push_back(ok ? s.substr(i, n) : replacement);
    i += ok ? n : 1;
  }
  return out;
}
}  // namespace detail

/// A whole text file (Python's `open(path, "rb").read().decode()`); an `io_error` naming it when it
/// cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  const std::vector<char> b = dtrain::detail::read_file(path);
  return std::string(b.begin(), b.end());
}

/// text_vectorization's options, Keras' names: `max_tokens` counts "" and "[UNK]" (0: no limit).
struct text_vectorization_options {
  std::size_t max_tokens = 0;
};

/// Keras `TextVectorization(split="character", standardize=None, output_mode="int")`: maps each
/// character of a text to its index in a vocabulary. Index 0 is the padding token "" and 1 the
/// out-of-vocabulary token "[UNK]" (what an unknown character becomes); `adapt` learns the rest from
/// a text, most frequent first and ties in descending byte order, exactly as Keras sorts them, keeping
/// at most `max_tokens` entries in all (0: no limit). Characters are Unicode code points of UTF-8 text.
class text_vectorization {
 public:
  using options = text_vectorization_options;

  explicit text_vectorization(options o = {}) : options_(o) {
    if (o.max_tokens == 1 || o.max_tokens == 2)
      throw value_error("text_vectorization: max_tokens " + std::to_string(o.max_tokens) +
                        " leaves no room for a character after the padding and [UNK] tokens (0 for no limit, or at least 3)");
    set_vocabulary({});
  }
  /// Keras' `vocabulary=` argument: the characters in index order from 2 on (without "" and "[UNK]").
  text_vectorization(std::vector<std::string> vocabulary, options o) : text_vectorization(o) {
    set_vocabulary(std::move(vocabulary));
  }

  /// Learns the vocabulary of `text` (replacing any earlier one).
  void adapt(std::string_view text) {
    std::map<std::string_view, std::size_t> counts;
    for (std::string_view c : detail::utf8_characters(text)) ++counts[c];
    std::vector<std::pair<std::string_view, std::size_t>> order(counts.begin(), counts.end());
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first > b.first;
    });
    std::vector<std::string> v;
    for (const auto& [c, n] : order) v.emplace_back(c);
    if (options_.max_tokens != 0 && v.size() > options_.max_tokens - 2) v.resize(options_.max_tokens - 2);
    set_vocabulary(std::move(v));
  }

  /// Keras `get_vocabulary()`: "", "[UNK]", then the characters by index.
  const std::vector<std::string>& get_vocabulary() const { return vocabulary_; }
  std::size_t vocabulary_size() const { return vocabulary_.size(); }

  /// The index of every character of `text`.
  std::vector<std::int32_t> operator()(std::string_view text) const {
    std::vector<std::int32_t> ids;
    const auto cs = detail::utf8_characters(text);
    ids.reserve(cs.size());
    for (std::string_view c : cs) {
      const auto it = index_.find(c);
      ids.push_back(it == index_.end() ? oov : it->second);
    }
    return ids;
  }

  /// The text of indices (padding dropped, [UNK] written as U+FFFD); an index outside the vocabulary
  /// is a value_error.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int32_t id = ids[i];
      if (id < 0 || std::size_t(id) >= vocabulary_.size())
        throw value_error("text_vectorization: index " + std::to_string(id) + " at position " + std::to_string(i) +
                          " is not in the vocabulary of " + std::to_string(vocabulary_.size()));
      s += id == oov ? std::string("\xEF\xBF\xBD") : vocabulary_[std::size_t(id)];
    }
    return s;
  }

  static constexpr std::int32_t padding = 0, oov = 1;

 private:
  void set_vocabulary(std::vector<std::string> v) {
    if (options_.max_tokens != 0 && v.size() + 2 > options_.max_tokens)
      throw value_error("text_vectorization: a vocabulary of " + std::to_string(v.size() + 2) +
                        " tokens (with \"\" and [UNK]) is more than max_tokens " + std::to_string(options_.max_tokens));
    vocabulary_ = {"", "[UNK]"};
    index_.clear();
    for (std::string& c : v) {
      if (detail::utf8_characters(c).size() != 1)
        throw value_error("text_vectorization: vocabulary entry \"" + c + "\" is not one character");
      if (!index_.emplace(c, std::int32_t(vocabulary_.size())).second)
        throw value_error("text_vectorization: the vocabulary has \"" + c + "\" twice");
      vocabulary_.push_back(std::move(c));
    }
  }

  options options_;
  std::vector<std::string> vocabulary_;
  std::map<std::string, std::int32_t, std::less<>> index_;
};

/// The windows of a sequence of token ids for next-token prediction: window i starts at
/// `i * sequence_stride` and is the example (ids[s, s + L), ids[s + 1, s + L + 1)) as float tensors of
/// shape (L), the targets one step ahead of the inputs. The ids are shared: copying costs nothing.
class token_windows {
 public:
  using element_type = example;

  token_windows(std::vector<std::int32_t> ids, std::size_t sequence_length, std::size_t sequence_stride)
      : ids_(std::make_shared<const std::vector<std::int32_t>>(std::move(ids))), length_(sequence_length),
        stride_(sequence_stride) {
    if (length_ == 0) throw value_error("next_token_windows: sequence_length must be at least 1");
    if (stride_ == 0) throw value_error("next_token_windows: sequence_stride must be at least 1");
    if (ids_->size() < length_ + 1)
      throw value_error("next_token_windows: " + std::to_string(ids_->size()) + " tokens make no window of " +
                        std::to_string(length_ + 1) + " (sequence_length " + std::to_string(length_) + " + 1)");
  }

  std::int64_t cardinality() const { return std::int64_t((ids_->size() - length_ - 1) / stride_ + 1); }
  data::options options() const { return {}; }
  std::size_t sequence_length() const { return length_; }

  class iterator {
   public:
    explicit iterator(const token_windows& w) : ids_(w.ids_), length_(w.length_), stride_(w.stride_), end_(w.cardinality()) {}
    std::optional<example> next() {
      if (i_ >= end_) return std::nullopt;
      const std::int32_t* ids = ids_->data() + std::size_t(i_++) * stride_;
      tensor x = zeros({length_}), y = zeros({length_});
      for (std::size_t k = 0; k < length_; ++k) x.data()[k] = float(ids[k]), y.data()[k] = float(ids[k + 1]);
      return example{std::move(x), std::move(y)};
    }
    std::int64_t skip(std::int64_t n) {
      const std::int64_t k = std::clamp<std::int64_t>(end_ - i_, 0, std::max<std::int64_t>(n, 0));
      i_ += k;
      return k;
    }

   private:
    std::shared_ptr<const std::vector<std::int32_t>> ids_;
    std::size_t length_, stride_;
    std::int64_t end_, i_ = 0;
  };
  iterator iterate(std::uint64_t) const { return iterator(*this); }

 private:
  std::shared_ptr<const std::vector<std::int32_t>> ids_;
  std::size_t length_, stride_;
};

/// Next-token windows of `sequence_length + 1` ids, one every `sequence_stride` ids (default: one
/// after another without overlap, as `batch(sequence_length + 1)` makes them; `sequence_length` makes
/// every id but the first a target exactly once).
inline token_windows next_token_windows(std::vector<std::int32_t> ids, std::size_t sequence_length,
                                        std::size_t sequence_stride = 0) {
  return token_windows(std::move(ids), sequence_length, sequence_stride == 0 ? sequence_length + 1 : sequence_stride);
}

}  // namespace dtrain::data
