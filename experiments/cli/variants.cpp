// `attnlab variants`: the attention registry as a reader sees it. Without arguments, every
// registered variant with its summary and each option's type, default and doc (from its
// VariantSchema); with a NAME, that variant only; with `--params SPEC --d-model D`, the layer
// built from SPEC with every parameter and buffer, its shape and dtype, and totals. Nothing
// here knows a particular variant: it goes through nn::variants() and make_attention only.
#include <algorithm>

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

}  // namespace

void variants_usage(std::ostream& out) {
  out << "usage: attnlab variants [NAME]\n"
         "       attnlab variants --params SPEC --d-model D\n"
         "\n"
         "Without --params: every registered attention variant (or only NAME) with its options,\n"
         "their types, defaults and meaning. With --params: the layer SPEC builds for d_model D,\n"
         "every parameter and buffer with its shape and dtype, and totals.\n"
         "SPEC is a spec string such as 'mha(heads=4, gate=hard_concrete)' (quote it for the shell).\n";
}

int run_variants(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    ArgList a(args, {"--params", "--d-model"}, {"--help"});
    if (a.flag("--help")) {
      variants_usage(out);
      return 0;
    }
    if (auto spec = a.get("--params")) {
      if (!a.positional().empty()) fail<UsageError>("unexpected argument '{}' with --params", a.positional()[0]);
      auto d = a.get("--d-model");
      if (!d) fail<UsageError>("--params needs --d-model D (the layer's width)");
      return list_params(*spec, parse_int_option("--d-model", *d, 1, int64_t(1) << 40), out);
    }
    if (a.get("--d-model")) fail<UsageError>("--d-model is only used with --params");
    if (a.positional().size() > 1) fail<UsageError>("expected at most one variant name, got {}", a.positional().size());
    const auto& all = nn::variants();
    if (a.positional().empty()) {
      for (size_t i = 0; i < all.size(); ++i) {
        if (i) out << "\n";
        list_variant(all[i].schema, out);
      }
      return 0;
    }
    const std::string& name = a.positional()[0];
    for (const auto& v : all)
      if (v.schema.name == name) {
        list_variant(v.schema, out);
        return 0;
      }
    std::vector<std::string> names;
    for (const auto& v : all) names.push_back(v.schema.name);
    fail<ValueError>("unknown variant {} (known: {})", name, join(names, ", "));
  } catch (const UsageError& e) {
    err << "attnlab variants: " << e.what() << " (try attnlab variants --help)\n";
    return 2;
  } catch (const std::exception& e) {
    err << "attnlab variants: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace attnlab::cli
