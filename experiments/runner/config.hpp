/// @file
/// Typed, validated experiment configs (docs/experiments.md).
///
/// An experiment declares a Schema: every key it reads, dotted ("model.attention", "train.steps"),
/// with a type, a default and a line of help. A Config starts from the schema's defaults and is
/// then overridden, in this order, by a preset, a TOML file and `--set key=value` assignments:
///
///   schema defaults < preset (TOML text registered with the experiment) < --config FILE < --set
///
/// TOML input may use nested tables or dotted keys ([model] attention = "mha" is
/// model.attention). Every key must be in the schema and every value of its type (an integer is
/// accepted where a float is expected); otherwise ConfigError names the key, the source (a file
/// path, "preset quick" or "--set") and, for TOML, the line: `run.toml:3: unknown key
/// 'model.atention' (did you mean 'model.attention'?)`. A `--set` value is read as a TOML value
/// first (`train.steps=2000`, `train.lr=3e-4`, `model.causal=true`, `task.name="listops"`); for a
/// string key, text that is not a TOML value is taken verbatim, so
/// `--set model.attention=talking_heads(heads=8)` needs no quotes.
/// @ingroup runner
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "tensor/error.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// A config key that is unknown, ill-typed or out of range, or a config source that fails to parse.
struct ConfigError : ValueError {
  using ValueError::ValueError;
};

/// The type of a config key.
enum class FieldType { Int, Float, Bool, String };
using Value = std::variant<int64_t, double, bool, std::string>;  ///< a config value, of one of the four types

/// "int", "float", "bool", "string"
const char* type_name(FieldType t);
/// A value as it would be written in TOML: 3, 0.001, true, "mha(heads=4)".
std::string to_toml_value(const Value& v);

/// One config key: its name, type, default and help line.
struct Field {
  std::string key;  ///< dotted, e.g. "model.attention"
  FieldType type = FieldType::Int;
  Value value;      ///< the default
  std::string help;
  /// An int key's accepted range (Schema::bound); the whole int64 range when unbounded.
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
  bool bounded() const { return min != std::numeric_limits<int64_t>::min() || max != std::numeric_limits<int64_t>::max(); }
};

/// The keys an experiment reads. Builder style:
///   Schema().add("train.steps", int64_t(2000), "optimizer steps").add("model.attention", "mha", "...")
/// Adding a key twice, a key of bad syntax, or a key that is a prefix table of another ("model" and
/// "model.d") is a ConfigError, raised when the schema is used rather than by add: schemas are
/// built in static initialisers (experiment registrations), where a throw would end the program
/// before main. add keeps the first such error and drops the key; error() returns it;
/// Config(schema) throws it and register_experiment refuses the experiment, naming it.
class Schema {
 public:
  Schema& add(const std::string& key, int64_t def, const std::string& help);  ///< adds an int key with its default and help (errors: see above)
  Schema& add(const std::string& key, int def, const std::string& help) { return add(key, int64_t(def), help); }  ///< adds an int key with its default and help
  Schema& add(const std::string& key, double def, const std::string& help);  ///< adds a float key with its default and help
  Schema& add(const std::string& key, bool def, const std::string& help);  ///< adds a bool key with its default and help
  Schema& add(const std::string& key, const std::string& def, const std::string& help);  ///< adds a string key with its default and help
  /// Adds a string key with its default and help.
  Schema& add(const std::string& key, const char* def, const std::string& help) {
    return add(key, std::string(def), help);
  }
  /// The range [min, max] of the int key `key` (added before): every count key has one, so that no
  /// value makes a loop that does not end (eval.batches = 2147483647) or an allocation that
  /// cannot succeed. A value outside it is a ConfigError naming the key, the value, its source and
  /// the range (docs/experiments.md, "Bounded counts"). A key not added, or not an int, is a
  /// schema error like a bad add.
  Schema& bound(const std::string& key, int64_t min, int64_t max);
  const Field* find(const std::string& key) const;  ///< nullptr when absent
  const std::vector<Field>& fields() const { return fields_; }
  /// The first bad add ("" when none), e.g. "Schema: key 'train.steps' added twice".
  const std::string& error() const { return error_; }

 private:
  std::vector<Field> fields_;  ///< in declaration order (the order of the resolved config file)
  std::string error_;
};

/// An experiment's resolved config: every key of its schema with a value and where that value came from (default, preset, file, --set).
class Config {
 public:
  explicit Config(Schema schema);  ///< every key at its default; ConfigError when schema.error() is set

  /// Merges a TOML document. `source` names it in errors (a path, or "preset quick").
  void merge_toml(const std::string& text, const std::string& source);
  /// Reads and merges a file; FileError naming the path when it cannot be read.
  void merge_file(const std::string& path);
  /// One "key=value" assignment from the command line.
  void set(const std::string& assignment);
  /// Sets one key to a typed value (the sweep's axes); ConfigError as above.
  void set_value(const std::string& key, const Value& value, const std::string& source);

  /// Typed reads; ConfigError when the key is not in the schema or has another type.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  ///< the float value of `key` (see get_int)
  bool get_bool(const std::string& key) const;  ///< the bool value of `key` (see get_int)
  const std::string& get_string(const std::string& key) const;  ///< the string value of `key` (see get_int)
  const Value& get(const std::string& key) const;  ///< the value of `key`, any type; ConfigError when the schema lacks it

  /// Where the key's value came from: "default", "preset quick", "run.toml:3", "--set".
  const std::string& origin(const std::string& key) const;

  /// The resolved config as TOML with nested tables, keys in schema order, each preceded by its
  /// help as a comment. merge_toml of this text into a fresh Config gives an equal Config.
  std::string to_toml() const;
  /// The resolved config as one flat JSON object {"model.attention": "mha", ...}.
  std::string to_json() const;

  const Schema& schema() const { return schema_; }  ///< the schema the config was built from
  bool operator==(const Config& other) const;  ///< same keys, same values (origins ignored)

 private:
  Schema schema_;
  std::vector<Value> values_;         ///< parallel to schema_.fields()
  std::vector<std::string> origins_;  ///< parallel to schema_.fields()
};

}  // namespace attnlab::runner
/// @}
