"""Checkpoints in the format everyone reads (DESIGN §6): Hugging Face safetensors (F32, sharded, with
model.safetensors.index.json) written by every rank in parallel and consolidated by torch's Distributed
Checkpoint Hugging Face writer, config.json with dtype float32, and the AdamW state as a Distributed
Checkpoint (optimizer/, resharded on load to any world size) plus trainer_state.json. The caller writes into
a fresh temporary directory that is renamed when complete, so no reader ever sees half a checkpoint."""
from __future__ import annotations

import json
import os
import shutil

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from .model import CheckpointError, hf_name

OPTIMIZER_DIR = "optimizer"
TRAINER_STATE = "trainer_state.json"


def read_safetensors(ckpt_dir: str) -> dict[str, torch.Tensor]:
    """All tensors of model.safetensors or of the files a model.safetensors.index.json names, as fp32."""
    from safetensors.torch import load_file

    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(ckpt_dir, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise CheckpointError(f"{ckpt_dir}: no model.safetensors and no model.safetensors.index.json")
    out = {}
    for name in files:
        path = os.path.join(ckpt_dir, name)
        if not os.path.exists(path):
            raise CheckpointError(f"{index}: names {name}, which is missing")
        out.update({k: v.float() for k, v in load_file(path).items()})
    return out


def read_full_state(policy, ckpt_dir: str) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors keyed by the policy's parameter names (rank 0 only: it is broadcast)."""
    names = {hf_name(k): k for k in policy.state_dict().keys()}
    tensors = read_safetensors(ckpt_dir)
    if "lm_head.weight" in names and "lm_head.weight" not in tensors and policy.lm.config.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors.get("model.embed_tokens.weight")
    missing = [n for n in names if tensors.get(n) is None]
    if missing:
        raise CheckpointError(f"{ckpt_dir}: tensor {json.dumps(missing[0])} missing ({len(missing)} missing in all)")
    for n, k in names.items():
        want = tuple(policy.state_dict()[k].shape)
        if tuple(tensors[n].shape) != want:
            raise CheckpointError(f"{ckpt_dir}: tensor {json.dumps(n)} has shape {list(tensors[n].shape)}, expected {list(want)}")
    return {names[n]: tensors[n] for n in names}


def load_weights(policy, full: dict[str, torch.Tensor]) -> None:
    """Every rank receives its shards of rank 0's full state (broadcast_from_rank0)."""
    set_model_state_dict(policy, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def save_weights(policy, out_dir: str, shard_bytes: int) -> None:
    """Sharded F32 safetensors + index from every rank's shards (torch DCP HuggingFaceStorageWriter)."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    sd = {hf_name(k): v for k, v in get_model_state_dict(policy).items()}
    if policy.lm.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)  # the same tensor as the embeddings; readers tie it back
    mapping, size, index = {}, 0, 1
    for name, t in sd.items():  # files of at most shard_bytes, tensors in model order
        nbytes = t.numel() * 4
        if size and size + nbytes > shard_bytes:
            index, size = index + 1, 0
        mapping[name] = index
        size += nbytes
    writer = HuggingFaceStorageWriter(path=out_dir, fqn_to_index_mapping=mapping, save_distributed=True, enable_consolidation=True)
    dcp.save(sd, storage_writer=writer)
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(os.path.join(out_dir, "sharded"), ignore_errors=True)


def write_config(src_dir: str, out_dir: str) -> None:
    """config.json of the source with dtype float32 (the weights are F32), as gpu-learner's save does."""
    with open(os.path.join(src_dir, "config.json")) as f:
        cfg = json.load(f)
    for key in ("dtype", "torch_dtype"):
        if key in cfg:
            cfg[key] = "float32"
    if "dtype" not in cfg and "torch_dtype" not in cfg:
        cfg["dtype"] = "float32"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def save_optimizer(policy, optimizer, out_dir: str, step: int) -> None:
    dcp.save({"optimizer": get_optimizer_state_dict(policy, optimizer)}, checkpoint_id=os.path.join(out_dir, OPTIMIZER_DIR))
    if dist.get_rank() == 0:
        with open(os.path.join(out_dir, TRAINER_STATE), "w") as f:
            json.dump({"engine": "fsdp", "step": step, "world_size": dist.get_world_size()}, f)


def load_optimizer(policy, optimizer, ckpt_dir: str) -> int:
    """Restores AdamW state and returns the optimizer step; 0 (fresh state) when the checkpoint has none."""
    path = os.path.join(ckpt_dir, OPTIMIZER_DIR)
    if not os.path.isdir(path):
        return 0
    state = {"optimizer": get_optimizer_state_dict(policy, optimizer)}
    dcp.load(state, checkpoint_id=path)
    set_optimizer_state_dict(policy, optimizer, state["optimizer"])
    with open(os.path.join(ckpt_dir, TRAINER_STATE)) as f:
        return int(json.load(f)["step"])
