#include "nn/attention/registry.hpp"

#include <new>

#include "nn/attention/bigbird.hpp"
#include "nn/attention/collaborative.hpp"
#include "nn/attention/compressed.hpp"
#include "nn/attention/diff.hpp"
#include "nn/attention/fnet.hpp"
#include "nn/attention/linear_attention.hpp"
#include "nn/attention/linformer.hpp"
#include "nn/attention/longformer.hpp"
#include "nn/attention/lsh.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/mla.hpp"
#include "nn/attention/mixer.hpp"
#include "nn/attention/nystrom.hpp"
#include "nn/attention/patterns.hpp"
#include "nn/attention/performer.hpp"
#include "nn/attention/retention.hpp"
#include "nn/attention/routing.hpp"
#include "nn/attention/sinkhorn.hpp"
#include "nn/attention/synthesizer.hpp"
#include "nn/attention/talking_heads.hpp"

namespace attnlab::nn {
namespace {

std::vector<Variant>& table() {
  static std::vector<Variant> t = {
      // In docs/attention.md order: the multi-head mechanism, efficient attention, then the
      // attention of current models.
      {MultiHeadAttention::schema(), MultiHeadAttention::make},
      {TalkingHeadsAttention::schema(), TalkingHeadsAttention::make},
      {CollaborativeAttention::schema(), CollaborativeAttention::make},
      {Synthesizer::schema(), Synthesizer::make},
      {LocalAttention::schema(), LocalAttention::make},
      {StridedSparseAttention::schema(), StridedSparseAttention::make},
      {FixedSparseAttention::schema(), FixedSparseAttention::make},
      {DilatedAttention::schema(), DilatedAttention::make},
      {Longformer::schema(), Longformer::make},
      {BigBird::schema(), BigBird::make},
      {LshAttention::schema(), LshAttention::make},
      {RoutingAttention::schema(), RoutingAttention::make},
      {SinkhornAttention::schema(), SinkhornAttention::make},
      {Linformer::schema(), Linformer::make},
      {CompressedAttention::schema(), CompressedAttention::make},
      {NystromAttention::schema(), NystromAttention::make},
      {LinearAttention::schema(), LinearAttention::make},
      {Performer::schema(), Performer::make},
      {FNet::schema(), FNet::make},
      {Mixer::schema(), Mixer::make},
      // The attention of current models.
      {LatentAttention::schema(), LatentAttention::make},
      {DiffAttention::schema(), DiffAttention::make},
      {Retention::schema(), Retention::make},
  };
  return t;
}

const Variant& find_variant(const std::string& name) {
  for (const Variant& v : table())
    if (v.schema.name == name) return v;
  std::string names;
  for (const Variant& v : table()) names += (names.empty() ? "" : ", ") + v.schema.name;
  fail<ValueError>("attention: unknown variant {} (known: {})", name, names);
}

}  // namespace

const std::vector<Variant>& variants() { return table(); }

namespace {
std::vector<std::string>& refused() {  // built on first use: safe during static init
  static std::vector<std::string> r;
  return r;
}
}  // namespace

bool register_variant(Variant variant) {
  const std::string& name = variant.schema.name;
  if (name.empty() || !variant.make) {
    refused().push_back(fmt::format("register_variant: variant '{}' needs a name and a factory", name));
    return false;
  }
  for (const Variant& v : table())
    if (v.schema.name == name) {
      refused().push_back(fmt::format("register_variant: a variant named '{}' already exists (the first "
                                      "registration is kept)", name));
      return false;
    }
  table().push_back(std::move(variant));
  return true;
}

const std::vector<std::string>& variant_registration_errors() { return refused(); }
void clear_variant_registration_errors() { refused().clear(); }

const VariantSchema& registered_schema(const std::string& name) { return find_variant(name).schema; }

namespace {

// Shape and memory errors raised inside a variant's constructor name a tensor, not what the user
// asked for; they are rethrown with the spec and d_model in front, keeping their type.
std::shared_ptr<Attention> build(const Variant& v, const Spec& spec, int64_t d_model) {
  Options options(v.schema, spec);
  const auto context = [&] { return fmt::format("attention {} with d_model={}: ", to_string(spec), d_model); };
  try {
    return v.make(options, d_model);
  } catch (const ShapeError& e) {
    throw ShapeError(context() + e.what());
  } catch (const MemoryError& e) {
    throw MemoryError(context() + e.what());
  } catch (const std::bad_alloc&) {
    throw MemoryError(context() + "out of memory while allocating its parameters");
  }
}

}  // namespace

std::shared_ptr<Attention> make_attention(const std::string& text, int64_t d_model) {
  Spec spec = parse_spec(text);
  return build(find_variant(spec.name), spec, d_model);
}

}  // namespace attnlab::nn
