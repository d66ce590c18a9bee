"""The trainer's one typed configuration object (lib/config.ts `learner.fsdp` resolved by the learner worker)."""
from __future__ import annotations

import dataclasses
import json

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    device: str = "cpu"                     # "cpu" (gloo) | "cuda" (nccl)
    param_dtype: str = "float32"            # compute dtype of gathered parameters; master weights stay fp32
    reduce_dtype: str = "float32"           # gradient reduce-scatter dtype
    cpu_offload: bool = False               # sharded parameters, gradients and AdamW state live in host memory
    activation_checkpointing: bool = True   # per decoder block
    max_tokens_per_micro_batch: int = 32768
    attn_implementation: str = "sdpa"
    checkpoint_shard_bytes: int = 4 << 30
    collective_timeout_seconds: float = 600
    threads: int = 0                        # torch threads per rank on the CPU; 0: torch's default

    @staticmethod
    def from_json(text: str) -> "TrainerConfig":
        raw = json.loads(text)
        fields = {f.name: f for f in dataclasses.fields(TrainerConfig)}
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise ValueError(f"trainer config: unknown field(s) {', '.join(unknown)}")
        cfg = TrainerConfig(**raw)
        if cfg.device not in ("cpu", "cuda"):
            raise ValueError(f'trainer config: device must be "cpu" or "cuda", got {json.dumps(cfg.device)}')
        for f in ("param_dtype", "reduce_dtype"):
            if getattr(cfg, f) not in DTYPES:
                raise ValueError(f"trainer config: {f} must be one of {', '.join(DTYPES)}, got {json.dumps(getattr(cfg, f))}")
        if cfg.max_tokens_per_micro_batch < 1:
            raise ValueError(f"trainer config: max_tokens_per_micro_batch must be >= 1, got {cfg.max_tokens_per_micro_batch}")
        return cfg


# the JSON names of a step request's "hp" (gpu-learner's TrainHyper) -> StepConfig's fields
_STEP_FIELDS = {
    "lr": "lr", "weightDecay": "weight_decay", "beta1": "beta1", "beta2": "beta2", "eps": "eps",
    "clipLow": "clip_low", "clipHigh": "clip_high", "maxGradNorm": "max_grad_norm", "lMax": "l_max",
    "mode": "mode", "normSequences": "norm_sequences", "microBatchTokens": "micro_batch_tokens",
}


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One optimizer step's settings (DESIGN §5), from the request's "hp" (gpu-learner's TrainHyper)."""

    lr: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    clip_low: float
    clip_high: float                        # GRPO++ clip-high; plain GRPO clips symmetrically at clip_low
    max_grad_norm: float
    l_max: float                            # GRPO++'s constant L_max of the length normalisation
    mode: str = "grpo++"                    # "grpo++" | "grpo"
    norm_sequences: int = 0                 # N of the normalisation; 0: the batch's own sequence count
    micro_batch_tokens: int | None = None   # the native engine's; this one uses TrainerConfig.max_tokens_per_micro_batch

    @staticmethod
    def from_hp(hp: dict, error=ValueError) -> "StepConfig":
        unknown = sorted(set(hp) - set(_STEP_FIELDS))
        if unknown:
            raise error(f"hp: unknown field(s) {', '.join(unknown)}")
        missing = sorted(k for k, f in _STEP_FIELDS.items() if k not in hp and f in _REQUIRED_STEP_FIELDS)
        if missing:
            raise error(f"hp: missing field(s) {', '.join(missing)}")
        kw = {_STEP_FIELDS[k]: v for k, v in hp.items() if v is not None}
        try:
            cfg = StepConfig(**{k: (v if k == "mode" else int(v) if k in ("norm_sequences", "micro_batch_tokens") else float(v)) for k, v in kw.items()})
        except (TypeError, ValueError) as e:
            raise error(f"hp: {e}") from None
        if cfg.mode not in ("grpo++", "grpo"):
            raise error(f'mode must be "grpo++" or "grpo", got {json.dumps(cfg.mode)}')
        return cfg


_REQUIRED_STEP_FIELDS = {f.name for f in dataclasses.fields(StepConfig) if f.default is dataclasses.MISSING}
