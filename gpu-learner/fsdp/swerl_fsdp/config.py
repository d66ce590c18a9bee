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
