"""GRPO++ maths (DESIGN §5), named as in lib/grpo.ts and gpu-learner (grpo.h, layout.h): small functions
over tensors, the formula in the doc comment. Pure: no process group, no model."""
from __future__ import annotations

import torch


class BatchError(ValueError):
    """Bad input to a step (the message names the field and the value); the same on every rank."""


def grpo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float):
    """Per token: ρ = exp(logπ_θ − logπ_old); ℓ = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high)).

    The clipped branch is taken only when strictly larger, so its (flat) gradient 0 applies exactly where
    gpu-learner's grpo_token_loss gives dℓ/dlogπ = 0. Returns (ℓ, ρ, clipped)."""
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped_value = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = clipped_value > unclipped
    return torch.where(clipped, clipped_value, unclipped), ratio, clipped


def sequence_loss_norms(offsets: list[int], mask: torch.Tensor, n_norm: int, l_max: float, mode: str) -> list[float]:
    """Per sequence, the divisor of its tokens' m·ℓ (0: the sequence adds nothing), as gpu-learner's
    sequence_loss_norms: GRPO++ N·L_max (a constant); GRPO N·Σ_t m_t (token mean, then mean over N).
    N = n_norm (the batch's episodes, including those left out because they add 0) or the sequence count."""
    n_seq = len(offsets) - 1
    n = float(n_norm if n_norm > 0 else n_seq)
    if mode == "grpo++":
        return [n * l_max] * n_seq
    norms = []
    for s in range(n_seq):
        msum = float(mask[offsets[s] + 1 : offsets[s + 1]].sum())  # the first token is never trained
        norms.append(0.0 if msum == 0 else n * msum)
    return norms


def micro_batches(offsets: list[int], max_tokens: int) -> list[tuple[int, int]]:
    """Whole sequences [s0, s1) with at most max_tokens tokens each; a longer sequence is an error here
    (the budget is a device-memory bound), unlike gpu-learner's for_micro_batches."""
    out, s0, n = [], 0, len(offsets) - 1
    while s0 < n:
        if offsets[s0 + 1] - offsets[s0] > max_tokens:
            raise BatchError(
                f"config.learner.fsdp.maxTokensPerMicroBatch: sequence {s0} has {offsets[s0 + 1] - offsets[s0]} tokens, "
                f"more than the budget of {max_tokens} tokens per micro-batch (raise it, or shorten episodes)")
        s1 = s0 + 1
        while s1 < n and offsets[s1 + 1] - offsets[s0] <= max_tokens:
            s1 += 1
        out.append((s0, s1))
        s0 = s1
    return out


def positions(offsets: list[int]) -> torch.Tensor:
    """Position ids of packed sequences: 0.. within each (transformers derives the block-diagonal mask from them)."""
    return torch.cat([torch.arange(offsets[s + 1] - offsets[s]) for s in range(len(offsets) - 1)])
