"""The policy: the Hugging Face causal LM of a checkpoint's config.json, its packed-sequence log-probs, and
FSDP2 sharding (torchtitan order: activation checkpointing per block, fully_shard per block, then root)."""
from __future__ import annotations

import json
import os

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from .grpo import BatchError, positions

# LM-head logits computed (and recomputed in backward) this many at a time: a 32K-token micro-batch of a
# 152K vocabulary would otherwise hold 20 GB of fp32 logits.
LOGITS_PER_CHUNK = 1 << 26


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (names the file and the field)."""


def read_hf_config(ckpt_dir: str, attn_implementation: str):
    """transformers' config object of ckpt_dir/config.json; unknown architectures are refused by name."""
    import transformers
    from transformers import AutoConfig

    path = os.path.join(ckpt_dir, "config.json")
    try:
        with open(path) as f:
            raw = json.load(f)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not JSON ({e})") from None
    arch = raw.get("architectures") or []
    try:
        cfg = AutoConfig.from_pretrained(ckpt_dir, attn_implementation=attn_implementation)
    except (ValueError, KeyError) as e:
        raise CheckpointError(
            f"{path}: model_type {json.dumps(raw.get('model_type'))} (architectures {json.dumps(arch)}) is not a model "
            f"transformers {transformers.__version__} knows: {str(e).splitlines()[0]}") from None
    for name in arch:
        if not hasattr(transformers, name):
            raise CheckpointError(f"{path}: architectures {json.dumps(arch)}: transformers {transformers.__version__} has no class {name}")
    return cfg


def build_model(cfg, device: str) -> nn.Module:
    """An uninitialised model on the meta device (no memory until sharded); weights come from load_weights."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    except ValueError as e:
        raise CheckpointError(f"config.json: {type(cfg).__name__} has no causal-LM class in transformers: {str(e).splitlines()[0]}") from None
    model.config.use_cache = False
    return model


def init_buffers(model: nn.Module, device: str) -> None:
    """Recomputes the non-persistent buffers (RoPE inverse frequencies) that building on the meta device left
    uninitialised: each module holding some is rebuilt from its config on the CPU and its buffers copied."""
    persistent = set(model.state_dict().keys())
    for mname, module in model.named_modules():
        own = [n for n, _ in module.named_buffers(recurse=False) if f"{mname}.{n}".lstrip(".") not in persistent]
        if not own:
            continue
        if not hasattr(module, "config"):
            raise CheckpointError(f"cannot initialise buffers {own} of {type(module).__name__} (no config to rebuild it from)")
        with torch.device("cpu"):
            fresh = type(module)(module.config)
        for n in own:
            getattr(module, n).copy_(getattr(fresh, n).to(device))


class PackedPolicy(nn.Module):
    """Log-probs of packed variable-length sequences (no padding): entry t = log p(ids[t] | earlier ids of its
    sequence), 0 for each first token (gpu-learner's convention). The LM head runs in recomputed chunks."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor, offsets: list[int]) -> torch.Tensor:
        pos = positions(offsets).to(ids.device)
        hidden = self.lm.model(input_ids=ids[None], position_ids=pos[None], use_cache=False).last_hidden_state[0]  # no cache: transformers derives the packed mask
        head = self.lm.get_output_embeddings()
        # next-token targets: position t predicts ids[t+1] unless t+1 starts a sequence
        T = ids.shape[0]
        targets = torch.empty_like(ids)
        targets[:-1] = ids[1:]
        targets[-1] = 0
        rows = max(1, LOGITS_PER_CHUNK // head.weight.shape[0])
        parts = []
        for a in range(0, T, rows):
            h = hidden[a : a + rows]
            parts.append(checkpoint(_target_logprobs, h, head.weight, targets[a : a + rows], use_reentrant=False)
                         if torch.is_grad_enabled() and T > rows else _target_logprobs(h, head.weight, targets[a : a + rows]))
        pred = torch.cat(parts)  # pred[t] = log p(ids[t+1] | ..t)
        out = torch.zeros(T, dtype=torch.float32, device=ids.device)
        starts = torch.zeros(T, dtype=torch.bool, device=ids.device)
        starts[torch.tensor([o for o in offsets[:-1] if o < T], dtype=torch.long, device=ids.device)] = True
        shifted = torch.cat([torch.zeros(1, dtype=pred.dtype, device=pred.device), pred[:-1]])
        return torch.where(starts, out, shifted.float())


def _target_logprobs(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = (h @ w.t()).float()
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]


def check_batch(ids: torch.Tensor, offsets: list[int], vocab: int) -> None:
    """The checks gpu-learner's validate_packed makes, with the same wording."""
    if len(offsets) < 2:
        raise BatchError(f"offsets must have at least 2 entries (n sequences + 1), got {len(offsets)}")
    if offsets[0] != 0:
        raise BatchError(f"offsets[0] must be 0, got {offsets[0]}")
    for i in range(1, len(offsets)):
        if offsets[i] < offsets[i - 1]:
            raise BatchError(f"offsets must be non-decreasing: offsets[{i}]={offsets[i]} < offsets[{i - 1}]={offsets[i - 1]}")
    if offsets[-1] != ids.numel():
        raise BatchError(f"offsets[{len(offsets) - 1}]={offsets[-1]} must equal ids.length={ids.numel()}")
    bad = ((ids < 0) | (ids >= vocab)).nonzero()
    if bad.numel():
        t = int(bad[0, 0])
        raise BatchError(f"ids[{t}]={int(ids[t])} is outside the vocabulary [0, {vocab})")


def shard(policy: PackedPolicy, mesh, param_dtype: torch.dtype, reduce_dtype: torch.dtype, cpu_offload: bool,
          activation_checkpointing: bool) -> None:
    """Activation checkpointing per decoder block, fully_shard per block, then the root (embeddings, final
    norm and LM head stay in the root group: a tied head shares its parameter with the embeddings).
    FSDP averages gradients over ranks; the step scales each rank's loss by the world size to sum them."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    kw = dict(mesh=mesh, mp_policy=mp, offload_policy=CPUOffloadPolicy() if cpu_offload else None)
    if kw["offload_policy"] is None:
        del kw["offload_policy"]
    layers = policy.lm.model.layers
    for i, block in enumerate(layers):
        if activation_checkpointing:
            block = checkpoint_wrapper(block, preserve_rng_state=False)
            layers[i] = block
        fully_shard(block, reshard_after_forward=True, **kw)
    fully_shard(policy, reshard_after_forward=False, **kw)


def hf_name(fqn: str) -> str:
    """The Hugging Face tensor name of a parameter of the (wrapped) policy."""
    return fqn.removeprefix("lm.").replace("_checkpoint_wrapped_module.", "")
