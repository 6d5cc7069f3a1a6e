// Fuzz target: the queries of `attnlab viz --serve` (experiments/cli/viz_request.cpp):
// parse_attend_query with a limit of 256 bytes, then encode_input of the decoded input for a
// byte-level language model (no <unk>) and for ListOps' tokens, at most 64 tokens. Identities
// checked on queries that parse: the input is at most 256 bytes; every id is in the vocabulary and
// never padding; input_text of the ids encodes back to the same ids.
#include "experiments/cli/viz_request.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace attnlab;

namespace {

runner::TaskData byte_lm() {
  runner::TaskData t;
  t.name = "fortunes";
  t.language_model = true;
  for (int b = 32; b < 127; ++b) t.token_bytes.push_back(static_cast<unsigned char>(b));
  t.token_bytes.push_back('\n');
  t.vocab_size = int64_t(t.token_bytes.size());
  return t;
}

runner::TaskData listops() {
  runner::TaskData t;
  t.name = "listops";
  t.tokens = {"<pad>", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "[MIN", "[MAX", "[MED", "[SM", "]"};
  t.vocab_size = int64_t(t.tokens.size());
  t.pad_id = 0;
  return t;
}

void check_encoding(const runner::TaskData& task, const std::string& text) {
  const std::vector<int64_t> ids = cli::encode_input(task, text, 64);
  fuzz::require(!ids.empty() && ids.size() <= 64, "fuzz_viz_request", "encode_input broke the token limit");
  for (int64_t id : ids)
    fuzz::require(id >= 0 && id < task.vocab_size && id != task.pad_id, "fuzz_viz_request", "an id outside the vocabulary");
  std::vector<int64_t> back;
  fuzz::must_succeed("fuzz_viz_request", "encode_input(input_text(ids))",
                     [&] { back = cli::encode_input(task, cli::input_text(task, ids), 64); });
  fuzz::require(back == ids, "fuzz_viz_request", "input_text does not encode back to the same ids");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const runner::TaskData lm = byte_lm(), ops = listops();
  const std::string_view query = fuzz::as_text(data, size);
  cli::AttendQuery q;
  bool parsed = false;
  fuzz::guarded("fuzz_viz_request", [&] {
    q = cli::parse_attend_query(query, 256);
    parsed = true;
  });
  if (!parsed || !q.input) return 0;
  fuzz::require(q.input->size() <= 256 && !q.input->empty(), "fuzz_viz_request", "an input outside 1..256 bytes");
  fuzz::guarded("fuzz_viz_request", [&] { check_encoding(lm, *q.input); });
  return fuzz::guarded("fuzz_viz_request", [&] { check_encoding(ops, *q.input); });
}
