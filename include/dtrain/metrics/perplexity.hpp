#pragma once
/// \file
/// KerasHub's `Perplexity`: a language model's exp(mean crossentropy per token), the number a
/// next-token model's loss is usually reported as.

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/losses/crossentropy.hpp"
#include "dtrain/metrics/metric.hpp"

namespace dtrain {

/// `keras_hub.metrics.Perplexity(from_logits, mask_token_id)`: over predictions (batch, steps, vocab)
/// and integer targets (batch, steps), exp of the mean sparse categorical crossentropy of the tokens,
/// leaving out the tokens whose target is `mask_token_id` (padding) when it is set. Its state is the
/// crossentropy's sum and the tokens counted, so replicas and workers add up.
struct perplexity {
  bool from_logits = false;
  std::optional<std::int32_t> mask_token_id{};

  std::string name() const { return "perplexity"; }
  std::size_t state_size() const { return 2; }
  void update(batch_view t, batch_view p, std::span<float> state) const {
    const sparse_categorical_crossentropy loss{{.from_logits = from_logits}};
    std::vector<float> per(detail::loss_rows(p));
    detail::host_per_example(loss, t, p, per.data(), nullptr, 1.0f);  // checks the shapes and labels
    double total = 0.0, count = 0.0;
    for (std::size_t r = 0; r < per.size(); ++r)
      if (!mask_token_id || t.data[r] != float(*mask_token_id)) total += per[r], count += 1.0;
    detail::add_update(state, {total, count});
  }
  float result(std::span<const float> state) const { return std::exp(detail::mean_result(state)); }
};

}  // namespace dtrain
