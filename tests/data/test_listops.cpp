// ListOps: the evaluator on hand-made and LRA-generated expressions, an independent recursive
// evaluator as a second oracle, printing/parsing, and the generator's bounds and determinism.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "experiments/data/listops.hpp"
#include "tensor/parallel.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::data;
using attnlab::testing::error_of;

namespace {

int64_t eval_str(const std::string& s) { return evaluate_listops(parse_listops(s)); }

// A recursive-descent twin of LRA's to_value on the parsed text, written independently of
// evaluate_listops: the median is numpy's (mean of the middle pair as a double) then int().
struct Reference {
  std::vector<std::string> words;
  size_t at = 0;
  int depth = 0, max_depth = 0;
  std::vector<int> arg_counts;

  int value() {
    const std::string w = words.at(at++);
    max_depth = std::max(max_depth, ++depth);
    int v;
    if (w.size() == 1 && std::isdigit(static_cast<unsigned char>(w[0]))) {
      v = w[0] - '0';
    } else {
      std::vector<int> args;
      while (words.at(at) != "]") args.push_back(value());
      ++at;
      arg_counts.push_back(int(args.size()));
      std::sort(args.begin(), args.end());
      const size_t k = args.size();
      if (w == "[MIN") v = args.front();
      else if (w == "[MAX") v = args.back();
      else if (w == "[SM") {
        int s = 0;
        for (int a : args) s += a;
        v = s % 10;
      } else {
        const double med = k % 2 ? args[k / 2] : (args[k / 2 - 1] + args[k / 2]) / 2.0;
        v = int(med);
      }
    }
    --depth;
    return v;
  }
};

Reference reference(const std::string& text) {
  Reference r;
  std::istringstream in(text);
  for (std::string w; in >> w;)
    if (w != "(" && w != ")") r.words.push_back(w);
  return r;
}

std::vector<std::vector<int64_t>> rows(const Tensor& t) {
  const int64_t w = t.size(1);
  auto all = t.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < t.size(0); ++i) out.emplace_back(all.begin() + i * w, all.begin() + (i + 1) * w);
  return out;
}

int64_t unpadded_length(const std::vector<int64_t>& r) {
  int64_t len = int64_t(r.size());
  while (len > 0 && r[len - 1] == kListOpsPad) --len;
  return len;
}

}  // namespace

TEST_CASE("evaluator on hand examples") {
  CHECK(eval_str("[MAX 2 9 [MIN 4 7 ] 0 ]") == 9);
  // MED of 1 2 3 4 is int(2.5) = 2, and (5 + 6 + 2) mod 10 = 3.
  CHECK(eval_str("[SM 5 6 [MED 1 2 3 4 ] ]") == 3);
  CHECK(eval_str("[MED 1 2 3 4 ]") == 2);
  CHECK(eval_str("[MED 9 8 ]") == 8);        // 8.5 -> 8
  CHECK(eval_str("[MED 7 1 3 ]") == 3);      // odd count: the middle of the sorted values
  CHECK(eval_str("[MED 0 9 9 0 ]") == 4);    // 4.5 -> 4
  CHECK(eval_str("[SM 9 9 9 ]") == 7);
  CHECK(eval_str("[MIN 5 [MAX 1 2 ] 3 ]") == 2);
  CHECK(eval_str("[MIN 4 ]") == 4);
  CHECK(eval_str("7") == 7);
  // LRA's TSV form carries parentheses from its tuple tree; they are skipped.
  CHECK(eval_str("( ( ( [MAX 2 ) 9 ) ] )") == 9);
  CHECK(listops_depth(parse_listops("7")) == 1);
  CHECK(listops_depth(parse_listops("[SM 1 2 ]")) == 2);
  CHECK(listops_depth(parse_listops("[SM 1 [MAX 3 [MIN 1 2 ] ] 2 ]")) == 4);
  // Trailing padding is ignored.
  std::vector<int64_t> padded = parse_listops("[SM 5 6 ]");
  padded.resize(10, kListOpsPad);
  CHECK(evaluate_listops(padded) == 1);
  CHECK(evaluate_listops(from_vector(padded)) == 1);
}

TEST_CASE("evaluator agrees with LRA's own generator and to_value") {
  // Written by lra_benchmarks/data/listops.py (generate_tree(1, 4, 5), to_string, to_value) under
  // random.seed(3): value, length without parentheses, and the TSV text.
  struct Gold {
    int value;
    int length;
    const char* text;
  };
  const Gold gold[] = {
      {3, 27,
       "( ( ( ( ( ( [MED ( ( ( ( ( ( [MIN 4 ) 6 ) 8 ) 9 ) ( ( ( ( ( [MED 0 ) 4 ) 9 ) 2 ) ] ) ) ] ) ) 3 ) 9 ) 1 ) "
       "( ( ( ( ( ( [MED ( ( ( [MIN 6 ) 2 ) ] ) ) 6 ) 0 ) 0 ) 9 ) ] ) ) ] )"},
      {5, 43,
       "( ( ( ( ( ( [MED ( ( ( ( ( [SM 0 ) 2 ) ( ( ( [MIN 1 ) 7 ) ] ) ) 1 ) ] ) ) 5 ) ( ( ( ( ( ( [MAX 9 ) 4 ) "
       "( ( ( ( ( [MIN 6 ) 1 ) 2 ) 8 ) ] ) ) 6 ) 9 ) ] ) ) ( ( ( ( ( ( [MAX 8 ) 0 ) 6 ) ( ( ( ( ( ( [MAX 5 ) 6 ) 6 "
       ") 7 ) 0 ) ] ) ) ( ( ( ( ( [SM 9 ) 1 ) 6 ) 3 ) ] ) ) ] ) ) 5 ) ] )"},
      {6, 22,
       "( ( ( ( ( ( [SM 8 ) 9 ) 2 ) ( ( ( ( [MED ( ( ( ( ( [MED 3 ) 8 ) 4 ) 6 ) ] ) ) 4 ) ( ( ( ( ( ( [MAX 6 ) 3 ) 2 "
       ") 9 ) 5 ) ] ) ) ] ) ) 2 ) ] )"},
      {9, 34,
       "( ( ( ( ( [MAX ( ( ( ( ( ( [SM 5 ) ( ( ( ( ( [MIN 5 ) 6 ) 6 ) 7 ) ] ) ) ( ( ( ( ( ( [MED 6 ) 2 ) 8 ) 5 ) 1 "
       ") ] ) ) ( ( ( ( ( ( [MED 1 ) 7 ) 8 ) 4 ) 1 ) ] ) ) 5 ) ] ) ) 4 ) ( ( ( ( ( [MAX 8 ) 7 ) 0 ) 9 ) ] ) ) 2 ) ] )"},
  };
  for (const Gold& g : gold) {
    std::vector<int64_t> tokens = parse_listops(g.text);
    CHECK(int64_t(tokens.size()) == g.length);
    CHECK(evaluate_listops(tokens) == g.value);
    CHECK(reference(g.text).value() == g.value);
    CHECK(listops_depth(tokens) <= 4);
  }
}

TEST_CASE("printing and parsing round trip") {
  const std::string s = "[MAX 2 9 [MIN 4 7 ] 0 [MED 1 2 ] [SM 3 3 ] ]";
  std::vector<int64_t> t = parse_listops(s);
  CHECK(t == std::vector<int64_t>{kListOpsMax, 3, 10, kListOpsMin, 5, 8, kListOpsEnd, 1, kListOpsMed, 2, 3,
                                  kListOpsEnd, kListOpsSum, 4, 4, kListOpsEnd, kListOpsEnd});
  CHECK(listops_to_string(t) == s);
  t.resize(30, kListOpsPad);
  CHECK(listops_to_string(from_vector(t)) == s);
  CHECK(listops_to_string(std::vector<int64_t>{kListOpsMin, 99, kListOpsPad, 2}) == "[MIN <id 99> <pad> 1");
}

TEST_CASE("malformed expressions are ValueErrors naming the defect") {
  CHECK(error_of([] { parse_listops("[MAX 2 12 ]"); }).find("'12'") != std::string::npos);
  CHECK(error_of([] { parse_listops("[FIRST 1 2 ]"); }).find("'[FIRST'") != std::string::npos);
  CHECK(error_of([] { eval_str("]"); }).find("closes no operator") != std::string::npos);
  CHECK(error_of([] { eval_str("[SM ]"); }).find("no arguments") != std::string::npos);
  CHECK(error_of([] { eval_str("[SM 1 2"); }).find("left open") != std::string::npos);
  CHECK(error_of([] { eval_str("1 2"); }).find("follows the end") != std::string::npos);
  CHECK(error_of([] { eval_str(""); }).find("empty") != std::string::npos);
  CHECK_THROWS_AS(evaluate_listops(std::vector<int64_t>{kListOpsSum, 2, kListOpsPad, 3, kListOpsEnd}), ValueError);
  CHECK_THROWS_AS(evaluate_listops(std::vector<int64_t>{kListOpsSum, 2, 16, kListOpsEnd}), ValueError);
  CHECK_THROWS_AS(evaluate_listops(zeros({3})), DTypeError);
}

TEST_CASE("generated data: shapes, length bounds, depth bound, targets, fast") {
  const ListOpsConfig c;  // the LRA defaults
  CHECK(c.max_depth == 10);
  CHECK(c.max_args == 10);
  CHECK(c.min_length == 500);
  CHECK(c.max_length == 2000);
  CHECK(c.leaf_prob == 0.75);
  const int64_t n = 1000;
  const auto t0 = std::chrono::steady_clock::now();
  TensorDataset ds = generate_listops(n, c, 1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("generate_listops(1000): ", secs, " s");
  CHECK(secs < 5);  // a budget that keeps data generation negligible; it takes well under a second
  CHECK(ds.inputs.shape() == Dims{n, 2000});
  CHECK(ds.targets.shape() == Dims{n});
  CHECK(ds.inputs.dtype() == kInt64);
  CHECK(ds.targets.dtype() == kInt64);

  auto targets = ds.targets.to_vector<int64_t>();
  std::map<int64_t, int> classes;
  std::map<int64_t, int64_t> ops;
  int64_t min_len = 1 << 30, max_len = 0;
  const auto all = rows(ds.inputs);
  for (int64_t i = 0; i < n; ++i) {
    const auto& r = all[i];
    const int64_t len = unpadded_length(r);
    min_len = std::min(min_len, len);
    max_len = std::max(max_len, len);
    CHECK(len >= 500);
    CHECK(len <= 2000);
    CHECK(std::count(r.begin(), r.begin() + len, kListOpsPad) == 0);
    for (int64_t k = 0; k < len; ++k)
      if (r[k] >= kListOpsMin && r[k] <= kListOpsSum) ops[r[k]]++;
    CHECK(evaluate_listops(r) == targets[i]);
    if (i < 50) {  // the slower string oracle on a sample
      Reference ref = reference(listops_to_string(r));
      CHECK(ref.value() == targets[i]);
      CHECK(ref.max_depth <= 10);
      for (int a : ref.arg_counts) {
        CHECK(a >= 2);
        CHECK(a <= 10);
      }
      CHECK(parse_listops(listops_to_string(r)) == std::vector<int64_t>(r.begin(), r.begin() + len));
    }
    CHECK(listops_depth(r) <= 10);
    classes[targets[i]]++;
  }
  MESSAGE("lengths ", min_len, "..", max_len);
  CHECK(classes.size() == 10);  // every value 0..9 occurs
  for (const auto& [cls, count] : classes) {
    CHECK(cls >= 0);
    CHECK(cls <= 9);
  }
  // The operator is drawn uniformly, whatever the tree's shape: each about a quarter.
  int64_t total = 0;
  for (const auto& [op, count] : ops) total += count;
  CHECK(ops.size() == 4);
  for (const auto& [op, count] : ops) CHECK(std::abs(double(count) / total - 0.25) < 0.02);
}

TEST_CASE("small configs respect depth and argument bounds") {
  ListOpsConfig c;
  c.max_depth = 3;
  c.max_args = 4;
  c.min_length = 1;
  c.max_length = 60;
  TensorDataset ds = generate_listops(400, c, 2);
  CHECK(ds.inputs.shape() == Dims{400, 60});
  std::set<int> depths;
  std::set<int> arg_counts;
  const auto all = rows(ds.inputs);
  for (int64_t i = 0; i < 400; ++i) {
    const auto& r = all[i];
    Reference ref = reference(listops_to_string(r));
    CHECK(ref.value() == ds.targets.to_vector<int64_t>()[i]);
    depths.insert(ref.max_depth);
    arg_counts.insert(ref.arg_counts.begin(), ref.arg_counts.end());
    CHECK(listops_depth(r) == ref.max_depth);
  }
  // With no lower length bound, lone digits (probability 0.75) and full depth both appear.
  CHECK(depths == std::set<int>{1, 2, 3});
  CHECK(arg_counts == std::set<int>{2, 3, 4});

  // Lengths are inclusive bounds: a config that only admits exactly 4 tokens.
  c.min_length = 4;
  c.max_length = 4;
  c.max_depth = 2;
  TensorDataset four = generate_listops(20, c, 3);
  for (const auto& r : rows(four.inputs)) CHECK(unpadded_length(r) == 4);
}

TEST_CASE("generation is fixed by the seed, example by example") {
  ListOpsConfig c;
  c.min_length = 50;
  c.max_length = 300;
  TensorDataset a = generate_listops(40, c, 5), b = generate_listops(40, c, 5), d = generate_listops(40, c, 6);
  CHECK(a.inputs.to_vector<int64_t>() == b.inputs.to_vector<int64_t>());
  CHECK(a.targets.to_vector<int64_t>() == b.targets.to_vector<int64_t>());
  CHECK(a.inputs.to_vector<int64_t>() != d.inputs.to_vector<int64_t>());
  // Each example has its own stream, so the thread count does not matter.
  const int threads = num_threads();
  set_num_threads(1);
  TensorDataset serial = generate_listops(40, c, 5);
  set_num_threads(threads);
  CHECK(serial.inputs.to_vector<int64_t>() == a.inputs.to_vector<int64_t>());
  TensorDataset prefix = generate_listops(10, c, 5);
  const auto pa = rows(prefix.inputs), aa = rows(a.inputs);
  for (int64_t i = 0; i < 10; ++i) CHECK(pa[i] == aa[i]);
}

TEST_CASE("generator config errors") {
  ListOpsConfig c;
  c.max_depth = 1;  // only lone digits
  std::string msg = error_of([&] { generate_listops(1, c, 0); });
  CHECK(msg.find("1..1") != std::string::npos);
  CHECK(msg.find("[500, 2000]") != std::string::npos);
  c = {};
  c.max_depth = 3;
  c.max_args = 3;  // at most 2 + 3 (2 + 3) = 17 tokens
  CHECK_THROWS_AS(generate_listops(1, c, 0), ValueError);
  c = {};
  c.min_length = 10;
  c.max_length = 5;
  CHECK_THROWS_AS(generate_listops(1, c, 0), ValueError);
  c = {};
  c.leaf_prob = 1.5;
  CHECK_THROWS_AS(generate_listops(1, c, 0), ValueError);
  c = {};
  c.max_args = 1;
  CHECK_THROWS_AS(generate_listops(1, c, 0), ValueError);
  c = {};
  c.max_depth = 100000;
  CHECK_THROWS_AS(generate_listops(1, c, 0), ValueError);
  // Reachable in principle, never hit: a length no tree has (2 or 3 tokens) exhausts the draws.
  c = {};
  c.min_length = 2;
  c.max_length = 3;
  CHECK(error_of([&] { generate_listops(1, c, 0); }).find("draws") != std::string::npos);
}
