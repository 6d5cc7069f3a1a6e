// Marker-delimited blocks of Markdown files (experiments/runner/marked_block.hpp).
#include "experiments/runner/marked_block.hpp"

#include <utility>
#include <vector>

#include "tensor/error.hpp"

namespace attnlab::runner {
namespace {

// The offsets of the line after the begin marker and of the end marker's line.
std::pair<size_t, size_t> block_span(const std::string& doc, const std::string& name, const std::string& path,
                                     const std::string& what) {
  const std::string begin = "<!-- " + name + ":begin -->", end = "<!-- " + name + ":end -->";
  std::vector<size_t> begins, ends;  // offsets of the marker lines
  for (size_t pos = 0; pos < doc.size();) {
    size_t eol = doc.find('\n', pos);
    if (eol == std::string::npos) eol = doc.size();
    const std::string line = doc.substr(pos, eol - pos);
    if (line == begin) begins.push_back(pos);
    if (line == end) ends.push_back(pos);
    pos = eol + 1;
  }
  if (begins.size() != 1 || ends.size() != 1 || ends[0] < begins[0])
    fail<ValueError>("{}: expected one line '{}' followed by one line '{}' to hold {}, found {} and {}", path, begin,
                     end, what, begins.size(), ends.size());
  return {begins[0] + begin.size() + 1, ends[0]};
}

}  // namespace

std::string marked_block(const std::string& doc, const std::string& name, const std::string& path,
                         const std::string& what) {
  const auto [from, to] = block_span(doc, name, path, what);
  return doc.substr(from, to - from);
}

std::string replace_marked_block(const std::string& doc, const std::string& name, const std::string& block,
                                 const std::string& path, const std::string& what) {
  const auto [from, to] = block_span(doc, name, path, what);
  return doc.substr(0, from) + block + doc.substr(to);
}

}  // namespace attnlab::runner
