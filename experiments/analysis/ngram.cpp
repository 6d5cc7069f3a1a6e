// Interpolated Kneser-Ney n-gram models (ngram.hpp has the formula). A k-gram is packed into one
// uint64 with its first token in the lowest `bits` bits, so the history of a k-gram (its first
// k-1 tokens) is `key & mask(k-1)` and its suffix (its last k-1 tokens, the (k-1)-gram one level
// down) is `key >> bits`.
#include "experiments/analysis/ngram.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <set>

#include "tensor/error.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::analysis {
namespace {

// Open addressing with linear probing, for the tens of millions of lookups of counting: a
// std::unordered_map allocates a node per key and is several times slower here. The key ~0 marks
// an empty slot; packed keys use at most 63 bits.
template <class V>
class FlatMap {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  FlatMap() { rehash(1024); }

  V& operator[](uint64_t key) {
    size_t i = slot(key);
    if (keys_[i] == key) return values_[i];
    if (2 * (size_ + 1) > keys_.size()) {  // load factor <= 1/2
      rehash(2 * keys_.size());
      i = slot(key);
    }
    keys_[i] = key;
    values_[i] = V{};
    ++size_;
    return values_[i];
  }
  const V* find(uint64_t key) const {
    const size_t i = slot(key);
    return keys_[i] == kEmpty ? nullptr : &values_[i];
  }
  size_t size() const { return size_; }
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != kEmpty) f(keys_[i], values_[i]);
  }

 private:
  static uint64_t mix(uint64_t x) {  // the splitmix64 finaliser: packed keys differ in few bits
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  size_t slot(uint64_t key) const {
    size_t i = size_t(mix(key)) & mask_;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    return i;
  }
  void rehash(size_t capacity) {
    std::vector<uint64_t> keys(capacity, kEmpty);
    std::vector<V> values(capacity);
    keys.swap(keys_);
    values.swap(values_);
    mask_ = capacity - 1;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmpty) {
        const size_t j = slot(keys[i]);
        keys_[j] = keys[i];
        values_[j] = values[i];
      }
  }
  std::vector<uint64_t> keys_;
  std::vector<V> values_;
  size_t size_ = 0, mask_ = 0;
};

struct GramCounts {
  uint32_t raw = 0;   // occurrences in the training text
  uint32_t cont = 0;  // N1+(. g): distinct tokens seen right before g
};
struct HistoryCounts {
  uint32_t raw_sum = 0, cont_sum = 0;  // c_k(h .) at the top level / below it
  uint32_t raw_n = 0, cont_n = 0;      // N1+(h .) at the top level / below it
};

double discount_of(int64_t n1, int64_t n2) { return n1 > 0 ? double(n1) / double(n1 + 2 * n2) : 0.5; }

void check_ids(std::span<const int64_t> ids, int64_t vocab, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail<ValueError>("ngram: {} token {} at position {} is outside the vocabulary [0, {})", what, ids[i], i, vocab);
}

}  // namespace

struct NGramModel::Impl {
  int64_t vocab = 0;
  int max_order = 0, bits = 0;
  bool continuation = true;                   // Kneser-Ney: continuation counts below the top level
  std::vector<FlatMap<GramCounts>> grams;     // [k]: the k-grams, k = 1..max_order (index 0 unused)
  std::vector<FlatMap<HistoryCounts>> hists;  // [k]: the (k-1)-token histories of the k-grams
  std::vector<double> d_top, d_low;           // [k]: D_k from raw / continuation counts
  std::vector<int64_t> distinct;              // [k]: distinct k-grams

  uint64_t mask(int tokens) const { return tokens == 0 ? 0 : (uint64_t(1) << (bits * tokens)) - 1; }

  // P_k(w | h) from lower = P_{k-1}(w | h'), for the k-gram `gram` = (h w); `top` selects raw counts.
  double step(int k, bool top, uint64_t gram, double lower) const {
    top = top || !continuation;
    const HistoryCounts* h = hists[size_t(k)].find(gram & mask(k - 1));
    const uint32_t sum = h ? (top ? h->raw_sum : h->cont_sum) : 0;
    if (sum == 0) return lower;
    const GramCounts* g = grams[size_t(k)].find(gram);
    const double c = g ? double(top ? g->raw : g->cont) : 0.0;
    const double d = top ? d_top[size_t(k)] : d_low[size_t(k)];
    const double n = double(top ? h->raw_n : h->cont_n);
    return (std::max(c - d, 0.0) + d * n * lower) / double(sum);
  }
};

NGramModel::NGramModel(std::span<const int64_t> train, int64_t vocab, int max_order, Smoothing smoothing)
    : impl_(std::make_unique<Impl>()) {
  if (vocab < 1) fail<ValueError>("ngram: vocab must be >= 1, got {}", vocab);
  const int bits = std::max(1, int(std::bit_width(uint64_t(vocab - 1))));
  if (max_order < 1 || max_order * bits > 63)
    fail<ValueError>("ngram: max_order must be in [1, {}] for a vocabulary of {} ({} bits per token), got {}",
                     63 / bits, vocab, bits, max_order);
  check_ids(train, vocab, "training");
  if (train.size() >= (size_t(1) << 32))  // counts are 32-bit
    fail<ValueError>("ngram: the training text has {} tokens; at most 2^32 - 1 are counted", train.size());
  Impl& m = *impl_;
  m.vocab = vocab;
  m.max_order = max_order;
  m.bits = bits;
  m.continuation = smoothing == Smoothing::kneser_ney;
  const size_t K = size_t(max_order), T = train.size();
  m.grams.resize(K + 1);
  m.hists.resize(K + 1);
  m.d_top.assign(K + 1, 0.0);
  m.d_low.assign(K + 1, 0.0);
  m.distinct.assign(K + 1, 0);
  // Raw counts, one table at a time, with a rolling key: the k-gram at i + 1 is the one at i
  // shifted down by a token, with train[i + k] on top.
  for (size_t k = 1; k <= K && k <= T; ++k) {
    uint64_t key = 0;
    for (size_t j = 0; j + 1 < k; ++j) key |= uint64_t(train[j]) << (bits * (j + 1));
    for (size_t i = 0; i + k <= T; ++i) {
      key = (key >> bits) | (uint64_t(train[i + k - 1]) << (bits * (k - 1)));
      ++m.grams[k][key].raw;
    }
  }
  // Continuation counts: each distinct (k+1)-gram a g adds one left neighbour a to its suffix g,
  // which occurs (one position later) and so is in the table.
  for (size_t k = 2; k <= K; ++k)
    m.grams[k].for_each([&](uint64_t key, const GramCounts&) { ++m.grams[k - 1][key >> bits].cont; });
  for (size_t k = 1; k <= K; ++k) {
    int64_t raw1 = 0, raw2 = 0, cont1 = 0, cont2 = 0;
    m.grams[k].for_each([&](uint64_t key, const GramCounts& g) {
      HistoryCounts& h = m.hists[k][key & m.mask(int(k) - 1)];
      h.raw_sum += g.raw;
      ++h.raw_n;
      if (g.cont > 0) {
        h.cont_sum += g.cont;
        ++h.cont_n;
      }
      raw1 += g.raw == 1;
      raw2 += g.raw == 2;
      cont1 += g.cont == 1;
      cont2 += g.cont == 2;
    });
    m.d_top[k] = discount_of(raw1, raw2);
    m.d_low[k] = m.continuation ? discount_of(cont1, cont2) : m.d_top[k];
    m.distinct[k] = int64_t(m.grams[k].size());
  }
}

NGramModel::~NGramModel() = default;
NGramModel::NGramModel(NGramModel&&) noexcept = default;
NGramModel& NGramModel::operator=(NGramModel&&) noexcept = default;

int NGramModel::max_order() const { return impl_->max_order; }
int64_t NGramModel::vocab() const { return impl_->vocab; }
int64_t NGramModel::distinct(int k) const { return k >= 1 && k <= impl_->max_order ? impl_->distinct[size_t(k)] : 0; }
double NGramModel::discount(int k, bool top) const {
  if (k < 1 || k > impl_->max_order)
    fail<ValueError>("ngram: discount of order {} asked of a model of orders 1..{}", k, impl_->max_order);
  return top ? impl_->d_top[size_t(k)] : impl_->d_low[size_t(k)];
}

double NGramModel::probability(int order, std::span<const int64_t> history, int64_t w) const {
  const Impl& m = *impl_;
  if (order < 1 || order > m.max_order)
    fail<ValueError>("ngram: order must be in [1, {}], got {}", m.max_order, order);
  check_ids(history, m.vocab, "history");
  check_ids(std::span<const int64_t>(&w, 1), m.vocab, "predicted");
  const size_t L = std::min(size_t(order - 1), history.size());
  const int top = int(L) + 1;
  uint64_t key = 0;  // the top-level gram: the last L history tokens, then w
  for (size_t j = 0; j < L; ++j) key |= uint64_t(history[history.size() - L + j]) << (m.bits * j);
  key |= uint64_t(w) << (m.bits * L);
  double p = 1.0 / double(m.vocab);
  for (int k = 1; k <= top; ++k) p = m.step(k, k == top, key >> (m.bits * (top - k)), p);
  return p;
}

std::vector<double> NGramModel::bits_per_token(std::span<const int64_t> text) const {
  const Impl& m = *impl_;
  if (text.size() < 2) fail<ValueError>("ngram: need a text of at least 2 tokens to score, got {}", text.size());
  check_ids(text, m.vocab, "evaluated");
  const size_t K = size_t(m.max_order);
  std::vector<double> total(K, 0.0), p_order(K + 1, 0.0);
  for (size_t i = 1; i < text.size(); ++i) {
    const size_t L = std::min(K - 1, i);  // history tokens available
    uint64_t key = 0;                      // the (L+1)-gram text[i-L .. i]
    for (size_t j = 0; j <= L; ++j) key |= uint64_t(text[i - L + j]) << (m.bits * j);
    // One pass up the levels serves every order: order k ends with the raw-count level k on the
    // continuation levels 1..k-1 below it, which the next order continues from.
    double p_low = 1.0 / double(m.vocab);
    for (size_t k = 1; k <= L + 1; ++k) {
      const uint64_t gram = key >> (m.bits * (L + 1 - k));
      p_order[k] = m.step(int(k), true, gram, p_low);
      if (k < L + 1) p_low = m.step(int(k), false, gram, p_low);
    }
    for (size_t k = 1; k <= K; ++k) total[k - 1] -= std::log2(p_order[std::min(k, L + 1)]);  // shorter history: order L+1
  }
  for (double& t : total) t /= double(text.size() - 1);
  return total;
}

double ngram_probability_reference(std::span<const int64_t> train, int64_t vocab, int order, std::span<const int64_t> history,
                            int64_t w, Smoothing smoothing) {
  using Gram = std::vector<int64_t>;
  const size_t L = std::min(size_t(std::max(order - 1, 0)), history.size());
  const size_t top = L + 1;
  // c_k(g): occurrences of g (raw), or distinct tokens right before an occurrence of g.
  auto count = [&](const Gram& g, bool raw) {
    int64_t n = 0;
    std::set<int64_t> before;
    for (size_t i = 0; i + g.size() <= train.size(); ++i)
      if (std::equal(g.begin(), g.end(), train.begin() + ptrdiff_t(i))) {
        ++n;
        if (i > 0) before.insert(train[i - 1]);
      }
    return raw ? n : int64_t(before.size());
  };
  auto discount = [&](size_t k, bool raw) {
    std::set<Gram> all;
    for (size_t i = 0; i + k <= train.size(); ++i) all.insert(Gram(train.begin() + ptrdiff_t(i), train.begin() + ptrdiff_t(i + k)));
    int64_t n1 = 0, n2 = 0;
    for (const Gram& g : all) {
      const int64_t c = count(g, raw);
      n1 += c == 1;
      n2 += c == 2;
    }
    return discount_of(n1, n2);
  };
  // P_k(w | h), h of k-1 tokens.
  std::function<double(size_t, const Gram&)> p = [&](size_t k, const Gram& h) -> double {
    if (k == 0) return 1.0 / double(vocab);
    const bool raw = k == top || smoothing == Smoothing::absolute;
    const double lower = p(k - 1, Gram(h.begin() + (k > 1 ? 1 : 0), h.end()));
    int64_t sum = 0, distinct = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      Gram g = h;
      g.push_back(v);
      const int64_t c = count(g, raw);
      sum += c;
      distinct += c > 0;
    }
    if (sum == 0) return lower;
    Gram hw = h;
    hw.push_back(w);
    const double d = discount(k, raw);
    return (std::max(double(count(hw, raw)) - d, 0.0) + d * double(distinct) * lower) / double(sum);
  };
  return p(top, Gram(history.end() - ptrdiff_t(L), history.end()));
}

std::vector<double> ngram_bits_per_token(const Tensor& train, const Tensor& val, int64_t vocab, int max_order,
                                         Smoothing smoothing) {
  auto ids = [](const Tensor& t, const char* name) {
    if (t.dim() != 1 || t.dtype() != kInt64)
      fail<ShapeError>("ngram_bits_per_token: {} must be int64 (T) token ids, got {} {}", name, dtype_name(t.dtype()),
                       to_string(t.shape()));
    return kernels::contiguous(t);
  };
  const Tensor tr = ids(train, "train"), va = ids(val, "val");
  const NGramModel model(std::span<const int64_t>(tr.data<int64_t>(), size_t(tr.numel())), vocab, max_order, smoothing);
  return model.bits_per_token(std::span<const int64_t>(va.data<int64_t>(), size_t(va.numel())));
}

}  // namespace attnlab::analysis
