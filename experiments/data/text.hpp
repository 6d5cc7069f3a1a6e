/// @file
/// English text from the Debian package `fortunes` (/usr/share/games/fortunes), at character
/// or byte level, with a deterministic train/validation split.
///
/// Files are read in sorted name order (skipping *.dat, *.u8 and directories); fortunes are
/// separated by lines holding only "%". Fortune i goes to validation when the FNV-1a hash of
/// its text is 0 mod 10, else to training, so the split does not depend on file order.
/// A fortune keeps its lines, each ending in "\n"; the separators are dropped.
/// @ingroup data
#pragma once
#include <string>
#include <vector>

#include "tensor/random.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";  ///< where Debian's `fortunes` installs the corpus

/// A tokenised text corpus, split into training and validation streams, with its vocabulary.
struct TextCorpus {
  Tensor train;                ///< int64 (T_train) token ids
  Tensor val;                  ///< int64 (T_val)
  std::vector<int64_t> train_docs;  ///< where each fortune starts in train (ascending, from 0)
  std::vector<int64_t> val_docs;    ///< where each fortune starts in val
  std::vector<int> id_of;      ///< byte -> id (256 entries)
  std::vector<unsigned char> byte_of;  ///< id -> byte (chars level: id 0 is `<unk>`)
  bool has_unk = false;                ///< char level: id 0 is `<unk>`, decoded as '?'
  int64_t vocab_size() const { return static_cast<int64_t>(byte_of.size()); }  ///< ids are in [0, vocab_size)
  std::string decode(const Tensor& ids) const;  ///< the text of int64 ids; IndexError for an id outside the vocabulary
  Tensor encode(const std::string& text) const;  ///< int64 ids of the bytes; a byte outside the vocabulary is id 0 (`<unk>`)
};

/// level: "char" (vocabulary = the bytes seen in training, sorted, plus `<unk>` = id 0 for bytes
/// only seen in validation) or "byte" (256 ids, id = byte value).
TextCorpus load_fortunes(const std::string& level = "char", const std::string& dir = kFortunesDir);

/// B random windows of length N + 1 from `tokens`: inputs (B, N) and next-token targets (B, N).
std::pair<Tensor, Tensor> lm_batch(const Tensor& tokens, int64_t batch, int64_t seq_len, Generator& gen);

/// One packed batch of lm_packed_batch.
struct PackedBatch {
  Tensor inputs;       ///< (B, N)
  Tensor targets;      ///< (B, N)
  Tensor segment_ids;  ///< (B, N)
};
/// Packed rows (docs/experiments.md, "lm", task.pack): each of the B rows is filled with whole
/// documents drawn at random (document i is tokens[docs[i], docs[i + 1]), the last one ends at T),
/// from a document's first token, the last document cut where the N + 1 tokens are full.
/// inputs (B, N), next-token targets (B, N) and segment_ids (B, N) int64: the document's index
/// within its row (0, 1, ...), for the inputs. A target at the last input of a document is the
/// first token of the next one, as in a plain window across two fortunes.
PackedBatch lm_packed_batch(const Tensor& tokens, const std::vector<int64_t>& docs, int64_t batch, int64_t seq_len,
                            Generator& gen);

}  // namespace attnlab::data
/// @}
