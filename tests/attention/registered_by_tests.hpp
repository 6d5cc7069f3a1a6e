// The attention variants that test cases register on purpose (test_conformance.cpp: layers with
// a defect the conformance suite must catch). A test binary run whole keeps them in the registry
// for the test cases after them, so loops over variants() that test the library's own variants
// skip these names.
#pragma once
#include <string>

namespace attnlab::testing {

inline bool registered_by_tests(const std::string& name) {
  return name == "defective" || name == "undeclared" || name == "self_only" || name == "claims_not_causal";
}

}  // namespace attnlab::testing
