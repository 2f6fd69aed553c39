#pragma once
/// \file
/// `any_dataset<E>`: a dataset of any pipeline type yielding `E`, behind one type (for options
/// aggregates such as `fit_options::validation_data`, and for storing pipelines). One virtual call
/// per element.

#include <memory>

#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

template <class E>
class any_dataset {
 public:
  using element_type = E;

  any_dataset() = default;
  // any_dataset itself, and what has no `iterate` (an iterator over one), first: checking dataset<D> on
  // them here would recurse (the copy of an `iterator<any_dataset>` asks whether it converts to one)
  template <class D>
    requires(!std::same_as<D, any_dataset>) && requires(const D& d) { d.iterate(std::uint64_t{0}); } && dataset<D> &&
            std::same_as<typename D::element_type, E>
  any_dataset(D d) : self_(std::make_shared<const model_t<D>>(std::move(d))) {}

  explicit operator bool() const { return self_ != nullptr; }
  std::int64_t cardinality() const { return self_->cardinality(); }
  data::options options() const { return self_->options(); }

  class iterator {
   public:
    struct concept_t {
      virtual ~concept_t() = default;
      virtual std::optional<E> next() = 0;
      virtual std::int64_t skip(std::int64_t) = 0;
    };
    explicit iterator(std::unique_ptr<concept_t> it) : it_(std::move(it)) {}
    std::optional<E> next() { return it_->next(); }
    std::int64_t skip(std::int64_t n) { return it_->skip(n); }

   private:
    std::unique_ptr<concept_t> it_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(self_->iterate(pass)); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::int64_t cardinality() const = 0;
    virtual data::options options() const = 0;
    virtual std::unique_ptr<typename iterator::concept_t> iterate(std::uint64_t) const = 0;
  };
  template <class D>
  struct model_t final : concept_t {
    explicit model_t(D d) : d_(std::move(d)) {}
    struct iter final : iterator::concept_t {
      explicit iter(decltype(std::declval<const D&>().iterate(0)) it) : it_(std::move(it)) {}
      std::optional<E> next() override { return it_.next(); }
      std::int64_t skip(std::int64_t n) override { return it_.skip(n); }
      decltype(std::declval<const D&>().iterate(0)) it_;
    };
    std::int64_t cardinality() const override { return d_.cardinality(); }
    data::options options() const override { return d_.options(); }
    std::unique_ptr<typename iterator::concept_t> iterate(std::uint64_t p) const override {
      return std::make_unique<iter>(d_.iterate(p));
    }
    D d_;
  };
  std::shared_ptr<const concept_t> self_;
};

}  // namespace dtrain::data
