/// @file
/// Attention spec strings: `name(opt=value, opt=value)` (docs/attention.md, "Spec strings").
/// Booleans are true/false; lists are joined by '+' (parts=random+vanilla). A variant declares
/// its options as a schema; `Options` checks a parsed spec against it, so an unknown option, an
/// ill-typed value or a value outside the allowed set is an error naming the variant, the
/// option and what is allowed.
/// @ingroup attention
#pragma once
#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/option_string.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The grammar is the one of tensor/option_string.hpp, shared with the LR schedules.
using Spec = OptionString;

/// Parses "talking_heads(heads=8, logit_heads=4)"; "mha" alone has no options. The name must
/// be an identifier.
Spec parse_spec(const std::string& text);
/// The spec text parse_spec reads back.
std::string to_string(const Spec& spec);

/// The type of a variant option.
enum class OptionType { Int, Double, Bool, Choice, List, IntList };

/// One option a variant accepts: name, type, default, one line of documentation, choices.
struct OptionSchema {
  std::string name;  ///< as written in a spec
  OptionType type;  ///< how its value parses
  std::string default_value;         ///< as written in a spec; "" = computed (see doc)
  std::string doc;                   ///< one line, e.g. "key size dk (default D/h)"
  std::vector<std::string> choices;  ///< Choice: allowed values; List: allowed items
};

/// How a variant stands to one feature of the Attention interface (docs/attention.md, "What a
/// variant declares").
enum class Support {
  probe,  ///< not declared, or decided by the options: the conformance suite tries the feature, and
          ///< a rejection naming the variant makes the checks needing it SKIP
  yes,    ///< supported: the suite checks it, and a rejection is a FAIL
  no,     ///< rejected with an error naming the variant: the suite SKIPs the checks needing it
};

/// "yes", "no" or "probe".
const char* to_string(Support s);

/// What a variant supports, declared in its schema; `attnlab variants` lists it and the
/// conformance suite (experiments/check/conformance.hpp) decides from it which checks apply. A
/// default-constructed value declares nothing (every feature probed), so a variant registered
/// without it is checked as the suite always probes; the built-in variants declare every feature.
struct Capabilities {
  Support cross = Support::probe;       ///< forward(x, context) with a context (B, M, D), M != N
  Support causal = Support::probe;      ///< forward(..., causal=true)
  Support key_mask = Support::probe;    ///< masks constant along N: (B|1, h|1, 1, M)
  Support query_mask = Support::probe;  ///< masks that vary along N: (B|1, h|1, N, M)
  Support pruning = Support::probe;     ///< a head_mask buffer (h) and prune_heads
  Support decoding = Support::probe;    ///< make_cache and forward_step
  Support segments = Support::probe;    ///< forward_packed with segment ids (packed sequences)
  bool causal_only = false;             ///< forward without causal is refused (retention)
  /// A masked, future or other document's input moves no allowed output (docs/attention.md,
  /// "Conventions shared by every variant"). lsh draws its buckets from every position, so it
  /// declares false and the suite skips key_mask, causal, causal_key_mask and segments.
  bool isolates_masked = true;

  /// Every feature supported (most multi-head variants); a variant starts from this and turns
  /// off what it lacks.
  static Capabilities all();
  /// Every feature absent: attention-free token mixing (fnet, mixer).
  static Capabilities none();
  /// The variants that summarise the keys along the sequence (linformer, compressed, nystrom,
  /// sinkhorn): no future to hide, so no causal, decoding or segment ids, and masks constant
  /// along N only.
  static Capabilities key_summary();
  /// The features as (name, support) pairs in the order above, for listings.
  std::vector<std::pair<std::string, Support>> features() const;
};

struct VariantSchema {
  std::string name;     ///< the registry name: make_attention("NAME(...)")
  std::string summary;  ///< one line, with the paper
  std::vector<OptionSchema> options;  ///< every option the variant accepts, in spec order
  /// Time and memory as functions of N, M, D, h, dk, dv and the variant's options, one line
  /// each (docs/attention.md, "What every variant offers"), e.g. "O(B h N M dk)".
  std::string time_cost;
  std::string memory_cost;
  Capabilities capabilities = {};
};

/// Typed access to a spec's option values, validated against a schema.
class Options {
 public:
  Options(const VariantSchema& schema, const Spec& spec);  ///< ValueError for an option the schema does not declare (listing the allowed ones)
  const std::string& variant() const { return variant_; }  ///< the variant's name
  bool given(const std::string& name) const;  ///< whether the spec wrote `name`
  /// Whether the schema declares `name` (mla has the head options without `bias`).
  bool accepts(const std::string& name) const;
  int64_t get_int(const std::string& name) const;  ///< the value or the default; ValueError (reject) when it does not parse as the type
  double get_double(const std::string& name) const;  ///< see get_int
  bool get_bool(const std::string& name) const;  ///< see get_int
  std::string get_choice(const std::string& name) const;  ///< one of the schema's choices; see get_int
  std::vector<std::string> get_list(const std::string& name) const;  ///< the '+'-joined items; see get_int
  std::vector<int64_t> get_int_list(const std::string& name) const;  ///< the '+'-joined integers; see get_int
  /// Int options whose default is computed ("" in the schema): the value if given.
  std::optional<int64_t> get_optional_int(const std::string& name) const;
  /// Throws ValueError "<variant>: option <name> ...: <why>".
  [[noreturn]] void reject(const std::string& name, const std::string& why) const;

 private:
  const OptionSchema& schema_of(const std::string& name) const;
  std::string raw(const std::string& name) const;
  std::string variant_;
  const VariantSchema* schema_;
  std::map<std::string, std::string> values_;
};

/// A layer's resolved option values as spec text, for format_spec: set(name, value) takes a
/// bool, an integer, a double (printed by format_number, so it parses back to the same value),
/// a string, or a vector of these ('+'-joined).
class OptionValues {
 public:
  /// Sets option `name` to `value` (see above); returns *this.
  template <class T>
  OptionValues& set(const std::string& name, const T& value) {
    values_[name] = text(value);
    return *this;
  }
  const std::map<std::string, std::string>& values() const { return values_; }  ///< name -> value text

 private:
  template <class T>
  static std::string text(const T& v) {
    if constexpr (std::same_as<T, bool>) {
      return v ? "true" : "false";
    } else if constexpr (std::integral<T>) {
      return std::to_string(v);
    } else if constexpr (std::floating_point<T>) {
      return format_number(v);
    } else if constexpr (requires { v.begin(); v.end(); typename T::value_type; } && !std::same_as<T, std::string>) {
      std::string s;
      for (const auto& item : v) {
        if (!s.empty()) s += '+';
        s += text(item);
      }
      return s;
    } else {
      return std::string(v);
    }
  }
  std::map<std::string, std::string> values_;
};

/// The spec string of a layer (docs/attention.md, "Spec strings"): the schema's name and every
/// option the layer set, in schema order, defaults included, so that a later change of a default
/// does not change a layer rebuilt from it. A layer leaves out a feature that is off together
/// with its sub-options (no gate: no gate_init; rope=false: no rope_base), and an empty value
/// (kv_index before pruning) is left out; with nothing set the spec is the bare name. A value
/// for an option the schema lacks is an error.
std::string format_spec(const VariantSchema& schema, const OptionValues& values);

}  // namespace attnlab::nn
/// @}
