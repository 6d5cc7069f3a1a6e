/// @file
/// ListOps (Nangia & Bowman 2018) as generated for the Long Range Arena (Tay et al. 2021,
/// lra_benchmarks/data/listops.py): nested prefix expressions over the digits 0-9 whose value
/// (a digit) is the class to predict, e.g. `[MAX 2 9 [MIN 4 7 ] 0 ]` = 9.
///
/// Operators, as LRA evaluates them:
///   MIN, MAX  the smallest / largest argument;
///   MED       int(np.median(args)): the middle value of the sorted arguments, and for an even
///             count the mean of the two middle values truncated toward zero (they are >= 0, so
///             rounded down): [MED 1 2 3 4 ] = int(2.5) = 2;
///   SM        the sum of the arguments mod 10.
///
/// Generation follows LRA's generate_tree(depth = 1, max_depth, max_args): a node at a depth
/// below max_depth is a leaf with probability leaf_prob (LRA: r > VALUE_P = 0.25 with r uniform,
/// so 0.75) holding a uniform digit, else an operator (uniform over the four) with
/// uniform 2..max_args arguments, each generated at depth + 1; a node at depth max_depth is
/// always a leaf. So a tree has at most max_depth levels counting the leaves, i.e. at most
/// max_depth - 1 nested operators. The length counts tokens without parentheses: one per digit,
/// two per operator (its opening token and `]`).
///
/// The length bound is met by plain rejection, as LRA does: whole trees are drawn until one has
/// min_length <= length <= max_length (LRA writes the strict inequalities, i.e. 501..1999 for its
/// 500/2000 flags; set min_length = 501, max_length = 1999 to match it exactly). A draw is
/// abandoned as soon as it exceeds max_length, which cannot change the distribution of the trees
/// kept (they never reach that point), only saves time. With the defaults about 1 draw in 12 is
/// kept. Example i uses the Philox stream (seed, i), so examples are generated in parallel and
/// the data set is fixed by its seed. LRA also removes duplicate trees; at these lengths a
/// duplicate is practically impossible, so this generator does not look for them.
/// @ingroup data
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/data/loader.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

/// Token ids. Digit d is id kListOpsDigit0 + d.
inline constexpr int64_t kListOpsPad = 0;
inline constexpr int64_t kListOpsDigit0 = 1;  ///< ids 1..10 are the digits 0..9
inline constexpr int64_t kListOpsMin = 11;    ///< [MIN
inline constexpr int64_t kListOpsMax = 12;    ///< [MAX
inline constexpr int64_t kListOpsMed = 13;    ///< [MED
inline constexpr int64_t kListOpsSum = 14;    ///< [SM
inline constexpr int64_t kListOpsEnd = 15;    ///< ]
inline constexpr int64_t kListOpsVocab = 16;  ///< token ids are in [0, 16)

/// The shape of generated ListOps expressions.
struct ListOpsConfig {
  int64_t max_depth = 10;     ///< levels of the tree counting the leaves, 1..1000
  int64_t max_args = 10;      ///< arguments per operator, 2..max_args
  int64_t min_length = 500;   ///< tokens, inclusive
  int64_t max_length = 2000;  ///< tokens, inclusive; also the padded width of the inputs
  double leaf_prob = 0.75;    ///< P(leaf) for a node at depth < max_depth
};

/// n examples: inputs int64 (n, max_length), tokens right-padded with kListOpsPad; targets int64
/// (n), the values 0..9. ValueError for a config that cannot produce a tree in the bounds (e.g.
/// max_depth 1 with min_length > 1). If no tree in the bounds turns up in a million draws (a
/// config whose bounds are reachable only with tiny probability), ValueError says so.
TensorDataset generate_listops(int64_t n, const ListOpsConfig& config = {}, uint64_t seed = 0);

/// The value 0..9 of one expression. Trailing padding is ignored; anything else that is not one
/// well-formed expression (unbalanced `]`, an operator with no arguments, an unknown id, tokens
/// after the expression) is a ValueError naming the position.
int64_t evaluate_listops(const std::vector<int64_t>& tokens);
int64_t evaluate_listops(const Tensor& tokens);  ///< int64, any shape holding one padded sequence

/// Levels of the expression's tree counting the leaves: a lone digit has depth 1,
/// `[SM 1 2 ]` depth 2. Validates like evaluate_listops.
int64_t listops_depth(const std::vector<int64_t>& tokens);

/// Space-separated text, e.g. "[MAX 2 9 [MIN 4 7 ] 0 ]"; trailing padding is dropped.
std::string listops_to_string(const std::vector<int64_t>& tokens);
std::string listops_to_string(const Tensor& tokens);  ///< the same for an int64 (L) tensor
/// The inverse: whitespace-separated tokens. "(" and ")" are skipped so LRA's TSV form
/// "( ( ( [MAX 2 ) 9 ) ] )" parses too. An unknown token is a ValueError naming it.
std::vector<int64_t> parse_listops(const std::string& text);

}  // namespace attnlab::data
/// @}
