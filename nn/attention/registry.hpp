// The attention registry: builds any variant from a spec string and d_model, and lists the
// variants with their options and defaults (`attnlab variants`). A variant is its own files and
// one line in registry.cpp; the tests, golden file and docs it also needs are listed in
// docs/attention.md, "Adding a variant: the files".
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention/attention.hpp"

namespace attnlab::nn {

using AttentionFactory = std::function<std::shared_ptr<Attention>(const Options&, int64_t d_model)>;

struct Variant {
  VariantSchema schema;
  AttentionFactory make;
};

// Every registered variant, in registration order.
const std::vector<Variant>& variants();
// Builds the variant named by `spec`, e.g. make_attention("mha(heads=4, key_size=32)", 128).
std::shared_ptr<Attention> make_attention(const std::string& spec, int64_t d_model);
// The schema of the registered variant `name` (ValueError listing the known names otherwise).
const VariantSchema& registered_schema(const std::string& name);
// Adds a variant at run time (user code); the name must be new.
void register_variant(Variant variant);

}  // namespace attnlab::nn
