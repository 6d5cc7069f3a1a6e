// `attnlab variants`: the attention registry as a reader sees it. Without arguments, every
// registered variant with its summary and each option's type, default and doc (from its
// VariantSchema); with a NAME, that variant only; with `--params SPEC --d-model D`, the layer
// built from SPEC with every parameter and buffer, its shape and dtype, and totals. Nothing
// here knows a particular variant: it goes through nn::variants() and make_attention only.
#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "experiments/cli/commands.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::cli {
namespace {

const char* type_name(nn::OptionType t) {
  switch (t) {
    case nn::OptionType::Int: return "int";
    case nn::OptionType::Double: return "double";
    case nn::OptionType::Bool: return "bool";
    case nn::OptionType::Choice: return "choice";
    case nn::OptionType::List: return "list";
    case nn::OptionType::IntList: return "int list";
  }
  return "?";
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

void list_variant(const nn::VariantSchema& s, std::ostream& out) {
  out << s.name << "  " << s.summary << "\n";
  if (!s.time_cost.empty()) out << "  cost: time " << s.time_cost << "; memory " << s.memory_cost << "\n";
  size_t width = 6;
  for (const auto& o : s.options) width = std::max(width, o.name.size());
  for (const auto& o : s.options) {
    // An empty default is computed from other values; the doc says from what.
    std::string doc = o.doc;
    if (o.type == nn::OptionType::Choice && !o.choices.empty()) doc += " (one of: " + join(o.choices, ", ") + ")";
    if (o.type == nn::OptionType::List && !o.choices.empty()) doc += " (+-joined items of: " + join(o.choices, ", ") + ")";
    out << fmt::format("  {:<{}}  {:<8}  {:<10}  {}\n", o.name, width, type_name(o.type),
                       o.default_value.empty() ? "computed" : o.default_value, doc);
  }
}

int list_params(const std::string& spec, int64_t d_model, std::ostream& out) {
  auto attn = nn::make_attention(spec, d_model);
  const TensorMap saved = attn->state_dict();  // to tell persistent buffers from derived ones
  const nn::NamedTensors params = attn->named_parameters(), buffers = attn->named_buffers();
  size_t width = 4;
  for (const auto* list : {&params, &buffers})
    for (const auto& [name, t] : *list) width = std::max(width, name.size());

  out << attn->spec() << "  d_model=" << d_model << "\n";
  int64_t total = 0, trainable = 0;
  out << "parameters:\n";
  if (params.empty()) out << "  (none)\n";
  for (const auto& [name, t] : params) {
    total += t.numel();
    if (t.requires_grad()) trainable += t.numel();
    out << fmt::format("  {:<{}}  {:<16}  {}{}\n", name, width, to_string(t.shape()), dtype_name(t.dtype()),
                       t.requires_grad() ? "" : "  (frozen)");
  }
  int64_t buffer_elems = 0;
  out << "buffers:\n";
  if (buffers.empty()) out << "  (none)\n";
  for (const auto& [name, t] : buffers) {
    buffer_elems += t.numel();
    out << fmt::format("  {:<{}}  {:<16}  {}{}\n", name, width, to_string(t.shape()), dtype_name(t.dtype()),
                       saved.count(name) ? "" : "  (not saved)");
  }
  out << fmt::format("total: {} parameter tensors, {} elements ({} trainable); {} buffers, {} elements\n",
                     params.size(), total, trainable, buffers.size(), buffer_elems);
  return 0;
}

CommandBody define_variants(CLI::App& cmd) {
  struct Args {
    std::string name, params;
    int64_t d_model = 0;
  };
  auto a = std::make_shared<Args>();
  auto* name = cmd.add_option("NAME", a->name, "list only this variant");
  auto* params = cmd.add_option("--params", a->params,
                                "build the layer SPEC, e.g. 'mha(heads=4, gate=hard_concrete)' (quote it for the shell), "
                                "and list its parameters and buffers");
  auto* d_model = cmd.add_option("--d-model", a->d_model, "the layer's width D (with --params)")
                      ->check(int_range(1, int64_t(1) << 40));
  params->needs(d_model)->excludes(name);
  d_model->needs(params);
  cmd.footer(
      "Without --params: every registered attention variant (or only NAME) with its options,\n"
      "their types, defaults and meaning. With --params SPEC --d-model D: the layer SPEC builds\n"
      "for width D, every parameter and buffer with its shape and dtype, and totals.");
  return [a](std::ostream& out, std::ostream&) {
    if (!a->params.empty()) return list_params(a->params, a->d_model, out);
    const auto& all = nn::variants();
    if (a->name.empty()) {
      for (size_t i = 0; i < all.size(); ++i) {
        if (i) out << "\n";
        list_variant(all[i].schema, out);
      }
      return 0;
    }
    for (const auto& v : all)
      if (v.schema.name == a->name) {
        list_variant(v.schema, out);
        return 0;
      }
    std::vector<std::string> names;
    for (const auto& v : all) names.push_back(v.schema.name);
    fail<ValueError>("unknown variant {} (known: {})", a->name, join(names, ", "));
  };
}

}  // namespace

const Command kVariantsCommand = {
    "variants",
    "list the attention variants and their options; --params SPEC --d-model D lists a layer's parameters and buffers",
    define_variants};

}  // namespace attnlab::cli
