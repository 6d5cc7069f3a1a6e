// Shared by the tutorial programs (experiments/tutorial/NN_*.cpp, docs/tutorial.md): printing a
// named tensor with its shape, and checking a claim numerically. A failed claim ends the program
// with exit status 1, so CTest (tutorial/NN_*) catches a tutorial that stopped being true.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "attnlab.hpp"

namespace tutorial {

inline void section(const std::string& title) { fmt::print("\n== {} ==\n", title); }

// name, shape, then the values (attnlab tensors format NumPy-like through fmt).
inline void show(const std::string& name, const attnlab::Tensor& t) {
  fmt::print("{} {}:\n{}\n", name, attnlab::to_string(t.shape()), t);
}

inline void check(bool ok, const std::string& claim) {
  fmt::print("{} {}\n", ok ? "[ok]    " : "[FAILED]", claim);
  if (!ok) std::exit(1);
}

// max |a - b| over every element.
inline double max_abs_diff(const attnlab::Tensor& a, const attnlab::Tensor& b) {
  return attnlab::max(attnlab::abs(a - b)).item();
}

// Copies every parameter and buffer `from` and `to` share by name (same shapes), so that two
// variants can be compared with the same weights.
inline void copy_shared(const attnlab::nn::Module& from, attnlab::nn::Module& to) {
  attnlab::NoGradGuard no_grad;
  const attnlab::TensorMap src = from.state_dict();
  for (auto named : {to.named_parameters(), to.named_buffers()})
    for (auto& [name, t] : named) {
      auto it = src.find(name);
      if (it != src.end()) attnlab::copy_(t, it->second);
    }
}

}  // namespace tutorial
