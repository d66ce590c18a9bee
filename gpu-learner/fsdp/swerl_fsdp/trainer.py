"""The long-lived trainer process group (one process per device, started by torchrun from the learner worker).

Rank 0 connects to the learner worker's control socket (--control HOST:PORT) and reads one JSON request per
line; every request is broadcast to all ranks, handled by all of them, and rank 0 writes the reply (and
progress lines while it works). Requests:
  {"id", "op": "load", "dir"}                  weights (+ AdamW state) of a checkpoint directory
  {"id", "op": "step", "batch", "hp"}          one GRPO++ optimizer step on a packed batch file -> StepStats
  {"id", "op": "logprobs", "batch", "out"}     packed log-probs of the batch on the current weights (no update) -> out
  {"id", "op": "save", "dir"}                  safetensors + index, config.json, optimizer/ into dir
  {"id", "op": "shutdown"}
Replies: {"id", "ok": true, ...} or {"id", "ok": false, "error", "kind": "input"} for bad input (the same on
every rank, the group lives on). Anything else is a crash: the rank exits, torchrun ends the group, and the
worker restarts it from the last checkpoint.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist

from . import checkpoint as ckpt
from .config import DTYPES, StepConfig, TrainerConfig
from .grpo import BatchError, grpo_token_loss, micro_batches, sequence_loss_norms
from .model import CheckpointError, PackedPolicy, build_model, check_batch, init_buffers, read_hf_config, shard

INPUT_ERRORS = (BatchError, CheckpointError)


class Trainer:
    def __init__(self, cfg: TrainerConfig, report):
        self.cfg = cfg
        self.report = report  # rank 0: sends a progress line (of the current request) to the worker
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cfg.device == "cuda" else torch.device("cpu")
        self.policy = None
        self.optimizer = None
        self.model_key = None
        self.step_count = 0
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(cfg.device, (dist.get_world_size(),))

    # ------------------------------------------------------------------ load / save

    def load(self, ckpt_dir: str) -> dict:
        holder = {}
        agree(lambda: holder.update(cfg=read_hf_config(ckpt_dir, self.cfg.attn_implementation)))
        hf_cfg = holder["cfg"]
        key = json.dumps({k: v for k, v in hf_cfg.to_dict().items() if k not in ("dtype", "torch_dtype", "transformers_version")},
                         sort_keys=True, default=str)
        if key != self.model_key:
            agree(lambda: holder.update(lm=build_model(hf_cfg, self.cfg.device)))
            self.policy = PackedPolicy(holder.pop("lm"))
            shard(self.policy, self.mesh, DTYPES[self.cfg.param_dtype], DTYPES[self.cfg.reduce_dtype], self.cfg.cpu_offload,
                  self.cfg.activation_checkpointing)
            self.policy.to_empty(device="cpu" if self.cfg.cpu_offload else self.device)
            init_buffers(self.policy.lm, "cpu" if self.cfg.cpu_offload else self.device)
            self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=1e-6, foreach=True)
            self.model_key = key
        self.report({"phase": "load", "part": "model"})
        # rank 0 reads the files; a bad checkpoint is reported by every rank before any collective
        full = {}
        agree(lambda: full.update(ckpt.read_full_state(self.policy, ckpt_dir)) if dist.get_rank() == 0 else None)
        ckpt.load_weights(self.policy, full)
        del full
        self.report({"phase": "load", "part": "weights"})
        self.optimizer.state.clear()
        self.step_count = ckpt.load_optimizer(self.policy, self.optimizer, ckpt_dir)
        return {"step": self.step_count, "parameters": sum(p.numel() for p in self.policy.parameters())}

    def save(self, out_dir: str, src_dir: str) -> dict:
        t0 = time.time()
        os.makedirs(out_dir, exist_ok=True)
        ckpt.save_weights(self.policy, out_dir, self.cfg.checkpoint_shard_bytes)
        if dist.get_rank() == 0:
            ckpt.write_config(src_dir, out_dir)
        self.report({"phase": "save", "part": "weights"})  # a long save is progress, not a stall
        if self.optimizer.state:  # an optimizer that never stepped has no state (and must not be given one)
            ckpt.save_optimizer(self.policy, self.optimizer, out_dir, self.step_count)
        elif dist.get_rank() == 0:
            with open(os.path.join(out_dir, ckpt.TRAINER_STATE), "w") as f:
                json.dump({"engine": "fsdp", "step": self.step_count, "world_size": dist.get_world_size()}, f)
        dist.barrier()
        return {"seconds": time.time() - t0}

    # ------------------------------------------------------------------ the GRPO++ step (DESIGN §5)

    def train_step(self, batch_path: str, hp: StepConfig) -> dict:
        t0 = time.time()
        batch = read_batch(batch_path)
        ids, offsets, mask, adv = batch["ids"], batch["offsets"].tolist(), batch["mask"], batch["advantages"]
        old = batch.get("old_logprobs")
        check_batch(ids, offsets, self.policy.lm.config.vocab_size)
        if adv.numel() != len(offsets) - 1:
            raise BatchError(f"batch.advantages.length={adv.numel()} must equal the number of sequences {len(offsets) - 1}")
        if mask.numel() != ids.numel():
            raise BatchError(f"batch.mask.length={mask.numel()} must equal batch.ids.length={ids.numel()}")
        mode = hp.mode
        clip_low = hp.clip_low
        clip_high = hp.clip_high if mode == "grpo++" else clip_low  # GRPO: symmetric clip
        norms = sequence_loss_norms(offsets, mask, hp.norm_sequences, hp.l_max, mode)
        plan = micro_batches(offsets, self.cfg.max_tokens_per_micro_batch)
        rank, world = dist.get_rank(), dist.get_world_size()
        mine = plan[rank::world]
        rounds = -(-len(plan) // world)  # every rank runs as many forward/backward passes (FSDP collectives)
        dev = next(self.policy.parameters()).device
        self.optimizer.zero_grad(set_to_none=True)
        sums = torch.zeros(4, dtype=torch.float64)  # Σ m·ℓ/norm, trainable tokens, clipped tokens, Σ ρ
        self.policy.train()
        for r in range(rounds):
            if r < len(mine):
                s0, s1 = mine[r]
                a, b = offsets[s0], offsets[s1]
                mb_off = [o - a for o in offsets[s0 : s1 + 1]]
                coef = torch.zeros(b - a, dtype=torch.float32)
                adv_tok = torch.zeros(b - a, dtype=torch.float32)
                for s in range(s0, s1):
                    if norms[s] == 0:
                        continue
                    t0s, t1s = offsets[s] - a, offsets[s + 1] - a
                    coef[t0s + 1 : t1s] = mask[offsets[s] + 1 : offsets[s + 1]] / norms[s]  # first token: no prediction
                    adv_tok[t0s:t1s] = float(adv[s])
                logp = self.policy(ids[a:b].to(dev), mb_off)
                coef, adv_tok = coef.to(dev), adv_tok.to(dev)
                # logπ_old: given, else the current weights' (one optimizer step per iteration ⇒ ρ = 1)
                old_lp = old[a:b].to(dev) if old is not None else logp.detach()
                loss_tok, ratio, clipped = grpo_token_loss(logp, old_lp, adv_tok, clip_low, clip_high)
                loss = (coef * loss_tok).sum()
                # the loss is normalised by the whole batch: gradients must add up over ranks, FSDP averages them
                (loss * world).backward()
                trained = coef != 0
                sums += torch.tensor([float(loss.detach()), float(trained.sum()), float((clipped & trained).sum()),
                                      float(ratio.detach()[trained].double().sum())], dtype=torch.float64)
            else:  # a rank with no micro-batch left joins the collectives with a zero loss
                logp = self.policy(torch.zeros(1, dtype=torch.long, device=dev), [0, 1])
                (logp * 0).sum().backward()
            self.report({"phase": "train", "microBatch": r + 1, "microBatches": rounds})
        dist.all_reduce(sums)
        grads = [p.grad for p in self.policy.parameters() if p.grad is not None]
        norm = float(torch.nn.utils.get_total_norm(grads, 2.0).full_tensor()) if grads else 0.0
        skipped = not (norm == norm and norm != float("inf"))
        if not skipped:
            if norm > hp.max_grad_norm:  # as gpu-learner: scale by max/(norm+1e-6) only when over
                torch._foreach_mul_(grads, hp.max_grad_norm / (norm + 1e-6))
            for g in self.optimizer.param_groups:
                g.update(lr=hp.lr, weight_decay=hp.weight_decay, betas=(hp.beta1, hp.beta2), eps=hp.eps)
            self.optimizer.step()
            self.step_count += 1
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, masked, n_clipped, ratio_sum = sums.tolist()
        return {
            "loss": loss_sum, "gradNorm": norm, "clipFraction": n_clipped / masked if masked else 0.0,
            "meanRatio": ratio_sum / masked if masked else 0.0, "tokens": int(ids.numel()), "seconds": time.time() - t0,
            "skipped": skipped, "step": self.step_count, "microBatches": len(plan),
        }


    @torch.no_grad()
    def logprobs(self, batch_path: str, out_path: str) -> dict:
        """Packed log-probs of the batch's sequences on the current weights, written to out_path (safetensors F32
        "logprobs"): entry t = log p(ids[t] | earlier ids of its sequence), 0 for each first token. The π_old of the
        sampler-learner mismatch and its correction (DESIGN §9); micro-batches as in train_step, gathered to rank 0."""
        batch = read_batch(batch_path)
        ids, offsets = batch["ids"], batch["offsets"].tolist()
        check_batch(ids, offsets, self.policy.lm.config.vocab_size)
        plan = micro_batches(offsets, self.cfg.max_tokens_per_micro_batch)
        rank, world = dist.get_rank(), dist.get_world_size()
        mine = plan[rank::world]
        rounds = -(-len(plan) // world)
        dev = next(self.policy.parameters()).device
        self.policy.eval()
        parts = []
        for r in range(rounds):
            if r < len(mine):
                s0, s1 = mine[r]
                a, b = offsets[s0], offsets[s1]
                lp = self.policy(ids[a:b].to(dev), [o - a for o in offsets[s0 : s1 + 1]])
                parts.append((a, lp.float().cpu()))
            else:  # every rank runs as many forward passes (FSDP all-gathers)
                self.policy(torch.zeros(1, dtype=torch.long, device=dev), [0, 1])
            self.report({"phase": "logprobs", "microBatch": r + 1, "microBatches": rounds})
        gathered = [None] * world
        dist.all_gather_object(gathered, parts)
        if rank == 0:
            from safetensors.torch import save_file

            out = torch.zeros(ids.numel(), dtype=torch.float32)
            for rank_parts in gathered:
                for a, lp in rank_parts:
                    out[a : a + lp.numel()] = lp
            tmp = f"{out_path}.tmp{os.getpid()}"
            save_file({"logprobs": out}, tmp)
            os.replace(tmp, out_path)
        dist.barrier()
        return {"tokens": int(ids.numel())}


def read_batch(path: str) -> dict[str, torch.Tensor]:
    """The packed batch the learner worker put in the store (safetensors: ids, offsets I32; mask, advantages,
    optional old_logprobs F32)."""
    from safetensors.torch import load_file

    try:
        t = load_file(path)
    except (OSError, Exception) as e:  # a missing or malformed file is bad input, not a crash
        raise BatchError(f"batch file {path}: {e}") from None
    for k in ("ids", "offsets", "mask", "advantages"):
        if k not in t:
            raise BatchError(f"batch file {path}: tensor {json.dumps(k)} missing")
    t["ids"] = t["ids"].long()
    return t


def agree(check) -> None:
    """Runs `check` on every rank; if any rank raises bad-input, every rank raises that rank's message."""
    err = None
    try:
        check()
    except INPUT_ERRORS as e:
        err = str(e)
    errs = [None] * dist.get_world_size()
    dist.all_gather_object(errs, err)
    first = next((e for e in errs if e), None)
    if first:
        raise BatchError(first)


def handle(trainer: Trainer | None, cfg: TrainerConfig, req: dict, report) -> tuple[Trainer | None, dict]:
    op = req.get("op")
    if trainer is None:
        trainer = Trainer(cfg, report)
    trainer.report = report  # progress lines carry this request's id
    if op == "load":
        return trainer, trainer.load(req["dir"])
    if trainer.policy is None:
        raise BatchError(f'"{op}" before any "load"')
    if op == "step":  # bad input is found before any collective, identically on every rank
        return trainer, trainer.train_step(req["batch"], StepConfig.from_hp(req["hp"], BatchError))
    if op == "logprobs":
        return trainer, trainer.logprobs(req["batch"], req["out"])
    if op == "save":
        return trainer, trainer.save(req["dir"], req["src"])
    raise BatchError(f"unknown op {json.dumps(op)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--control", required=True, help="HOST:PORT of the learner worker's control socket")
    ap.add_argument("--config", required=True, help="TrainerConfig as JSON")
    args = ap.parse_args(argv)
    cfg = TrainerConfig.from_json(args.config)
    rank = int(os.environ.get("RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    conn = None
    if rank == 0:
        host, port = args.control.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        conn = sock.makefile("rwb")

    def send(msg: dict) -> None:
        if conn is not None:
            conn.write((json.dumps(msg) + "\n").encode())
            conn.flush()

    if cfg.device == "cuda" and torch.cuda.device_count() < local_world:
        send({"fatal": f"config.learner.fsdp.nprocPerNode: {local_world} processes per node but this host has "
                       f"{torch.cuda.device_count()} CUDA devices (learner.device \"cuda\")", "kind": "input"})
        sys.exit(2)
    if cfg.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    dist.init_process_group("nccl" if cfg.device == "cuda" else "gloo",
                            timeout=datetime.timedelta(seconds=cfg.collective_timeout_seconds))
    # ranks wait for the next request as long as the worker is idle (an iteration's rollouts take many minutes):
    # that broadcast gets a group of its own without collective_timeout_seconds (a hang is caught by the
    # worker's stall timer while a request is pending)
    control = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=30))
    import transformers
    # what the first load and save would import lazily, at start-up (not under the worker's stall timer)
    import transformers.models.qwen3.modeling_qwen3  # noqa: F401  (Qwen3 is what swerl writes)
    from safetensors.torch import load_file  # noqa: F401
    from torch.distributed.checkpoint import HuggingFaceStorageWriter  # noqa: F401
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401

    pids = [None] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    send({"hello": True, "worldSize": dist.get_world_size(), "pids": pids, "torch": torch.__version__,
          "transformers": transformers.__version__})
    trainer = None
    while True:
        req = [None]
        if rank == 0:
            line = conn.readline()
            req[0] = json.loads(line) if line else {"op": "shutdown"}
        dist.broadcast_object_list(req, src=0, group=control)
        req = req[0]
        if req.get("op") == "shutdown":
            send({"id": req.get("id"), "ok": True})
            break
        try:
            trainer, out = handle(trainer, cfg, req, lambda p, rid=req.get("id"): send({"id": rid, "progress": p}))
            send({"id": req.get("id"), "ok": True, **out})
        except INPUT_ERRORS as e:
            send({"id": req.get("id"), "ok": False, "error": str(e), "kind": "input"})
        except Exception:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)  # torchrun ends the other ranks; the worker restarts the group from the last checkpoint
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
