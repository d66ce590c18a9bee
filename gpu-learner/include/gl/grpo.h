// GRPO++ per-token policy loss (DESIGN §5), shared by every backend.
#pragma once
#include <algorithm>
#include <cmath>

namespace gl {

struct TokenLoss {
  double loss;     // ℓ
  double dlogp;    // dℓ/dlogπ_θ
  double ratio;    // ρ
  bool clipped;    // the clipped branch is strictly larger (its gradient is 0)
};

// ρ = exp(logπ_θ − logπ_old); ℓ = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high)).
// dℓ/dlogπ_θ = −A·ρ when the unclipped branch is active, 0 when the clipped one is (clip is flat there).
inline TokenLoss grpo_token_loss(double logp, double old_logp, double adv, double clip_low, double clip_high) {
  const double ratio = std::exp(logp - old_logp);
  const double clipped_ratio = std::min(std::max(ratio, 1.0 - clip_low), 1.0 + clip_high);
  const double unclipped = -adv * ratio;
  const double clipped = -adv * clipped_ratio;
  TokenLoss r;
  r.ratio = ratio;
  r.clipped = clipped > unclipped;
  r.loss = r.clipped ? clipped : unclipped;
  r.dlogp = r.clipped ? 0.0 : -adv * ratio;
  return r;
}

}  // namespace gl
