// The rows a micro-batch runs through the model when sequences share a prefix (a GRPO group's prompt): the shared
// tokens are forwarded once and each sequence continues on their keys and values, so a group of G sequences with a
// P-token prompt runs P − 1 + Σ (len_i − P + 1) rows instead of Σ len_i. Log-probs and gradients are those of the
// sequences run one by one, up to the rounding of sums taken in another order.
//   A group: consecutive sequences whose first `min_shared` or more tokens agree; P = the length they all share.
//   Its prefix span: tokens 0..P−2 at positions 0..P−2 (queries see only the prefix, causal).
//   A member's segment span: tokens P−1..len−1 at positions P−1..; its queries see the prefix's keys, then its own.
// Token P − 1 is the last shared token and the first row of every segment: its log-prob comes from the prefix (shared),
// and its hidden state starts the member's own continuation.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "gl/engine.h"

namespace gl {

// Rows [start, start + len) at positions pos0.. ; prefix: index of the span whose keys precede its own (−1: none).
struct RowSpan {
  int64_t start, len, pos0;
  int64_t prefix;
};

struct RowPlan {
  int64_t s0 = 0, s1 = 0;          // sequences [s0, s1) of the batch
  std::vector<int32_t> ids, pos;   // per row
  std::vector<int32_t> target;     // per row: the token id it predicts (−1: none)
  std::vector<RowSpan> spans;      // attention units, in row order
  // per token t of the batch's sequences s0..s1 (index t − offsets[s0]): the row whose prediction is its log-prob,
  // −1 for a sequence's first token
  std::vector<int64_t> src_row;
  // row → the batch's token indices it predicts (CSR, tokens in increasing order): a prefix row predicts one token
  // of every member
  std::vector<int64_t> row_tok_off, row_tok;
  int64_t rows() const { return int64_t(ids.size()); }
  int64_t longest() const;  // largest position + 1
};

// Micro-batches of whole sequences with at most max_rows rows each (a longer sequence alone), prefixes shared within
// each (min_shared <= 0: never), in order; fn sees each plan once.
void for_row_plans(const PackedBatch& b, int64_t max_rows, int64_t min_shared, const std::function<void(const RowPlan&)>& fn);

}  // namespace gl
