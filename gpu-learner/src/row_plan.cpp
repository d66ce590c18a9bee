// Shared-prefix row plans (row_plan.h).
#include "row_plan.h"

#include <algorithm>
#include <limits>

namespace gl {

namespace {

constexpr int64_t kMaxGroup = 256;  // sequences per shared-prefix group considered by the partition

int64_t seq_len(const PackedBatch& b, int64_t s) { return b.offsets[s + 1] - b.offsets[s]; }

int64_t common_prefix(const PackedBatch& b, int64_t s, int64_t t) {
  const int32_t *x = b.ids + b.offsets[s], *y = b.ids + b.offsets[t];
  const int64_t n = std::min(seq_len(b, s), seq_len(b, t));
  int64_t i = 0;
  while (i < n && x[i] == y[i]) i++;
  return i;
}

// The partition of the sequences into runs of consecutive ones that forward their common prefix once, with the
// fewest rows (a run of one is a plain sequence). shared[s]: the run's common prefix length, 0 when s runs alone.
std::vector<int64_t> shared_prefixes(const PackedBatch& b, int64_t min_shared) {
  const int64_t n = b.n_seqs;
  std::vector<int64_t> shared(size_t(n), 0);
  if (min_shared <= 0 || n < 2) return shared;
  std::vector<int64_t> lcp(size_t(n), 0);  // lcp[s] = common prefix of s−1 and s
  for (int64_t s = 1; s < n; s++) lcp[size_t(s)] = common_prefix(b, s - 1, s);
  // best[j]: fewest rows for sequences [0, j); from[j]: where its last run starts
  std::vector<int64_t> best(size_t(n + 1), std::numeric_limits<int64_t>::max()), from(size_t(n + 1), 0);
  best[0] = 0;
  for (int64_t j = 1; j <= n; j++) {
    int64_t P = std::numeric_limits<int64_t>::max(), tail = 0;  // tail = Σ_{k>i} len_k over the run [i, j)
    for (int64_t i = j - 1; i >= 0 && j - i <= kMaxGroup; i--) {
      if (i < j - 1) {
        P = std::min(P, lcp[size_t(i + 1)]);
        if (P < min_shared) break;  // the run cannot share a long enough prefix, nor can any longer one
        tail += seq_len(b, i + 1);
      }
      const int64_t k = j - 1 - i;  // members after the first
      const int64_t cost = seq_len(b, i) + (k ? tail - k * (P - 1) : 0);
      if (best[size_t(i)] + cost < best[size_t(j)]) {
        best[size_t(j)] = best[size_t(i)] + cost;
        from[size_t(j)] = i;
      }
    }
  }
  for (int64_t j = n; j > 0; j = from[size_t(j)]) {
    const int64_t i = from[size_t(j)];
    if (j - i < 2) continue;
    int64_t P = std::numeric_limits<int64_t>::max();
    for (int64_t s = i + 1; s < j; s++) P = std::min(P, lcp[size_t(s)]);
    for (int64_t s = i; s < j; s++) shared[size_t(s)] = P;
  }
  return shared;
}

// Appends span rows for tokens [t0, t1) of sequence s at positions t0.., each row predicting the next token.
void add_rows(RowPlan& p, const PackedBatch& b, int64_t s, int64_t t0, int64_t t1, int64_t prefix) {
  const int32_t* x = b.ids + b.offsets[s];
  const int64_t len = seq_len(b, s), start = p.rows();
  p.spans.push_back({start, t1 - t0, t0, prefix});
  for (int64_t t = t0; t < t1; t++) {
    p.ids.push_back(x[t]);
    p.pos.push_back(int32_t(t));
    p.target.push_back(t + 1 < len ? x[t + 1] : -1);
  }
}

// The rows of sequences [s0, s1): runs of two or more with a shared prefix (shared[s] > 0, same run while the value
// and the prefix agree) forward it once.
RowPlan build(const PackedBatch& b, int64_t s0, int64_t s1, const std::vector<int64_t>& shared) {
  RowPlan p;
  p.s0 = s0;
  p.s1 = s1;
  const int64_t base = b.offsets[s0];
  p.src_row.assign(size_t(b.offsets[s1] - base), -1);
  for (int64_t s = s0; s < s1;) {
    int64_t e = s + 1;
    const int64_t P = shared[size_t(s)];
    while (P > 0 && e < s1 && shared[size_t(e)] == P && common_prefix(b, s, e) >= P) e++;
    if (e - s < 2) {  // alone: one causal span
      const int64_t start = p.rows(), a = b.offsets[s] - base;
      add_rows(p, b, s, 0, seq_len(b, s), -1);
      for (int64_t t = 1; t < seq_len(b, s); t++) p.src_row[size_t(a + t)] = start + t - 1;
      s = e;
      continue;
    }
    const int64_t pre = int64_t(p.spans.size()), pre_start = p.rows();
    add_rows(p, b, s, 0, P - 1, -1);  // the shared tokens but the last, once
    for (int64_t m = s; m < e; m++) {
      const int64_t start = p.rows(), a = b.offsets[m] - base;
      add_rows(p, b, m, P - 1, seq_len(b, m), pre);
      for (int64_t t = 1; t < seq_len(b, m); t++) p.src_row[size_t(a + t)] = t <= P - 1 ? pre_start + t - 1 : start + t - P;
    }
    s = e;
  }
  // row → tokens (CSR), tokens in increasing order
  p.row_tok_off.assign(size_t(p.rows() + 1), 0);
  for (int64_t r : p.src_row)
    if (r >= 0) p.row_tok_off[size_t(r + 1)]++;
  for (int64_t r = 0; r < p.rows(); r++) p.row_tok_off[size_t(r + 1)] += p.row_tok_off[size_t(r)];
  p.row_tok.resize(size_t(p.row_tok_off.back()));
  std::vector<int64_t> fill(p.row_tok_off.begin(), p.row_tok_off.end() - 1);
  for (int64_t t = 0; t < int64_t(p.src_row.size()); t++)
    if (p.src_row[size_t(t)] >= 0) p.row_tok[size_t(fill[size_t(p.src_row[size_t(t)])]++)] = base + t;
  return p;
}

}  // namespace

int64_t RowPlan::longest() const {
  int64_t m = 0;
  for (const RowSpan& s : spans) m = std::max(m, s.pos0 + s.len);
  return m;
}

void for_row_plans(const PackedBatch& b, int64_t max_rows, int64_t min_shared, const std::function<void(const RowPlan&)>& fn) {
  const std::vector<int64_t> shared = shared_prefixes(b, std::max<int64_t>(min_shared, min_shared > 0 ? 2 : 0));
  int64_t s0 = 0;
  while (s0 < b.n_seqs) {
    // rows the micro-batch [s0, s1) needs: a run's later members add only what follows the shared prefix
    int64_t s1 = s0 + 1, rows = seq_len(b, s0);
    while (s1 < b.n_seqs) {
      const int64_t P = shared[size_t(s1)];
      const bool joins = P > 0 && shared[size_t(s1 - 1)] == P && common_prefix(b, s1 - 1, s1) >= P;
      const int64_t add = joins ? seq_len(b, s1) - P + 1 : seq_len(b, s1);
      if (rows + add > max_rows) break;
      rows += add;
      s1++;
    }
    fn(build(b, s0, s1, shared));
    s0 = s1;
  }
}

}  // namespace gl
