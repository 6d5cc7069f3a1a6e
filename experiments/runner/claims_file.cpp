// Reading a study folder's claims.toml (experiments/runner/claims.hpp).
#include <toml++/toml.h>

#include <fmt/format.h>

#include "experiments/runner/claims.hpp"
#include "tensor/error.hpp"

namespace attnlab::runner {
namespace {

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

// Text that goes into a Markdown table cell and a CSV field: one line, no cell separator.
std::string cell_text(const toml::node& n, const std::string& path, const std::string& key) {
  const auto* s = n.as_string();
  if (!s) fail<ValueError>("{}:{}: '{}' must be a string", path, line_of(n), key);
  const std::string t = s->get();
  if (t.find_first_of("\n\r|") != std::string::npos)
    fail<ValueError>("{}:{}: '{}' must be one line without '|' (it becomes a table cell), got '{}'", path, line_of(n),
                     key, t);
  if (t.find("<!--") != std::string::npos)
    fail<ValueError>("{}:{}: '{}' must not contain '<!--' (the README's table markers)", path, line_of(n), key);
  return t;
}

std::vector<std::string> names_at(const toml::node& n, const std::string& path, const std::string& key) {
  const auto* arr = n.as_array();
  if (!arr) fail<ValueError>("{}:{}: '{}' must be a list of expectation names", path, line_of(n), key);
  std::vector<std::string> out;
  for (const auto& e : *arr) out.push_back(cell_text(e, path, key));
  return out;
}

RegisteredSweep read_sweep_entry(const toml::node& n, const std::string& path) {
  const auto* t = n.as_table();
  if (!t) fail<ValueError>("{}:{}: [[sweep]] must be a table", path, line_of(n));
  RegisteredSweep s;
  s.line = line_of(n);
  for (auto&& [k, v] : *t) {
    const std::string key(k.str());
    std::string* field = key == "copy" ? &s.copy : key == "results" ? &s.results : key == "file" ? &s.file
                         : key == "registered"                                 ? &s.registered
                                                                               : nullptr;
    if (!field)
      fail<ValueError>("{}:{}: unknown key '{}' in [[sweep]] (copy, results, file, registered)", path, line_of(v), key);
    *field = cell_text(v, path, "sweep." + key);
  }
  if (s.file.empty() || s.registered.empty())
    fail<ValueError>("{}:{}: [[sweep]] needs file (the sweep file as committed) and registered (its commit)", path,
                     s.line);
  if (s.registered.find_first_not_of("0123456789abcdef") != std::string::npos || s.registered.size() < 7)
    fail<ValueError>("{}:{}: sweep.registered '{}' is not a commit id (7 to 40 hex digits)", path, s.line, s.registered);
  return s;
}

Calibration read_calibration(const toml::node& n, const std::string& path) {
  const auto* t = n.as_table();
  if (!t) fail<ValueError>("{}:{}: [calibration] must be a table", path, line_of(n));
  Calibration c;
  c.line = line_of(n);
  for (auto&& [k, v] : *t) {
    const std::string key(k.str());
    if (key == "file") {
      c.file = cell_text(v, path, "calibration.file");
    } else if (key == "order") {
      const auto* i = v.as_integer();
      if (!i || i->get() < 1 || i->get() > 6)
        fail<ValueError>("{}:{}: calibration.order must be an integer from 1 to 6", path, line_of(v));
      c.order = int(i->get());
    } else if (key == "baseline") {
      const auto* b = v.as_table();
      if (!b || b->empty())
        fail<ValueError>("{}:{}: calibration.baseline must be a table of axis values, e.g. {{ \"model.attention\" = "
                         "\"mha(heads=4)\" }}",
                         path, line_of(v));
      for (auto&& [bk, bv] : *b) {
        std::string text;
        if (const auto* s = bv.as_string()) text = s->get();
        else if (const auto* i = bv.as_integer()) text = std::to_string(i->get());
        else fail<ValueError>("{}:{}: calibration.baseline values must be strings or integers", path, line_of(bv));
        c.baseline.emplace_back(std::string(bk.str()), text);
      }
    } else {
      fail<ValueError>("{}:{}: unknown key '{}' in [calibration] (file, baseline, order)", path, line_of(v), key);
    }
  }
  if (c.file.empty() || c.baseline.empty())
    fail<ValueError>("{}:{}: [calibration] needs file and baseline", path, c.line);
  return c;
}

ClaimSpec read_claim(const toml::node& n, const std::string& path, const std::string& study) {
  const auto* t = n.as_table();
  if (!t) fail<ValueError>("{}:{}: [[claim]] must be a table", path, line_of(n));
  ClaimSpec c;
  c.study = study;
  c.line = line_of(n);
  for (auto&& [k, v] : *t) {
    const std::string key(k.str());
    if (key == "text") c.text = cell_text(v, path, key);
    else if (key == "source") c.source = cell_text(v, path, key);
    else if (key == "seeds_note") c.seeds_note = cell_text(v, path, key);
    else if (key == "primary") c.primary = names_at(v, path, key);
    else if (key == "secondary") c.secondary = names_at(v, path, key);
    else if (key == "control") c.control = names_at(v, path, key);
    else if (key == "independent_seeds") {
      const auto* b = v.as_boolean();
      if (!b) fail<ValueError>("{}:{}: 'independent_seeds' must be true or false", path, line_of(v));
      c.independent_seeds = b->get();
    } else {
      fail<ValueError>("{}:{}: unknown key '{}' in [[claim]] (text, source, primary, secondary, control, "
                       "independent_seeds, seeds_note)",
                       path, line_of(v), key);
    }
  }
  if (c.text.empty()) fail<ValueError>("{}:{}: [[claim]] needs text (the claim in words)", path, c.line);
  if (c.primary.empty())
    fail<ValueError>("{}:{}: claim '{}' needs primary = [...]: the expectations that decide it", path, c.line, c.text);
  if (!c.independent_seeds && c.seeds_note.empty())
    fail<ValueError>("{}:{}: claim '{}': independent_seeds = false needs seeds_note (what the seeds share)", path,
                     c.line, c.text);
  return c;
}

}  // namespace

StudyClaims parse_study_claims(const std::string& text, const std::string& path, const std::string& study) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    fail<ValueError>("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  StudyClaims out;
  out.study = study;
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key == "calibration") {
      out.calibration = read_calibration(v, path);
      continue;
    }
    const auto* arr = v.as_array();
    if ((key != "sweep" && key != "claim") || !arr)
      fail<ValueError>("{}:{}: unknown key '{}' (a claims file holds [[sweep]], [[claim]] and [calibration])", path,
                       line_of(v), key);
    for (const auto& e : *arr) {
      if (key == "sweep") out.sweeps.push_back(read_sweep_entry(e, path));
      else out.claims.push_back(read_claim(e, path, study));
    }
  }
  return out;
}

}  // namespace attnlab::runner
