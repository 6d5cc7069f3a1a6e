/// @file
/// The attention registry: builds any variant from a spec string and d_model, and lists the
/// variants with their options and defaults (`attnlab variants`). A variant is its own files and
/// one line in registry.cpp; the tests, golden file and docs it also needs are listed in
/// docs/attention.md, "Adding a variant: the files".
/// @ingroup attention
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention/attention.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

using AttentionFactory = std::function<std::shared_ptr<Attention>(const Options&, int64_t d_model)>;  ///< builds a layer from its parsed options and the model width

/// A registered attention variant: its schema (name, options, docs) and its factory.
struct Variant {
  VariantSchema schema;  ///< name, options with defaults, description
  AttentionFactory make;  ///< builds the layer
};

/// Every registered variant, in registration order.
const std::vector<Variant>& variants();
/// Builds the variant named by `spec`, e.g. make_attention("mha(heads=4, key_size=32)", 128).
std::shared_ptr<Attention> make_attention(const std::string& spec, int64_t d_model);
/// The schema of the registered variant `name` (ValueError listing the known names otherwise).
const VariantSchema& registered_schema(const std::string& name);
/// Adds a variant (user code, e.g. `static const bool registered = nn::register_variant({...});`);
/// returns true. Registrations run in static initialisers, where a throw would end the program
/// before main, so a variant whose name is taken (or empty, or without a factory) is left out
/// without throwing: the message naming it is kept in variant_registration_errors() and false is
/// returned. attnlab::cli::main refuses to run while there is one.
bool register_variant(Variant variant);
/// The messages of refused variant registrations, in order.
const std::vector<std::string>& variant_registration_errors();
/// Forgets them (tests that register bad variants on purpose).
void clear_variant_registration_errors();

}  // namespace attnlab::nn
/// @}
