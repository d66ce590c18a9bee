"""The reference the native engine is held to (test/cpu-heavy/torch-oracle.test.ts, npm run check:torch): transformers' own
causal LM in fp32 on the CPU, plain autograd, no sharding. For each case it computes the packed log-probs
(one forward over the packed row, position ids restarting per sequence), the GRPO++ loss Σ m·ℓ/(N·L_max) and
every parameter's gradient, and writes them as safetensors beside a JSON summary.

  python -m swerl_fsdp.oracle --cases cases.json      [{"model": DIR, "batch": FILE, "out": DIR, "lMax", "clipLow", "clipHigh"}]
  python -m swerl_fsdp.oracle --make DIR --config JSON  a random model written by transformers' save_pretrained
  python -m swerl_fsdp.oracle --make-many JSON          [{"dir", "config", "seed"}]: several in one process
"""
from __future__ import annotations

import argparse
import json
import os

import torch

from .grpo import grpo_token_loss, positions, sequence_loss_norms
from .trainer import read_batch


def reference(model_dir: str, batch_path: str, l_max: float, clip_low: float, clip_high: float) -> dict:
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    lm.train()
    b = read_batch(batch_path)
    ids, offsets, mask, adv = b["ids"], b["offsets"].tolist(), b["mask"], b["advantages"]
    # transformers' full logits (no chunking): log p(ids[t] | earlier ids of its sequence); 0 for first tokens
    logits = lm(input_ids=ids[None], position_ids=positions(offsets)[None], use_cache=False).logits[0].float()
    lp_all = torch.log_softmax(logits, -1)
    logp = torch.zeros(ids.numel())
    for s in range(len(offsets) - 1):
        a, e = offsets[s], offsets[s + 1]
        if e - a > 1:
            logp = logp.index_put((torch.arange(a + 1, e),), lp_all[a : e - 1].gather(1, ids[a + 1 : e, None])[:, 0])
    norms = sequence_loss_norms(offsets, mask, 0, l_max, "grpo++")
    coef, adv_tok = torch.zeros(ids.numel()), torch.zeros(ids.numel())
    for s in range(len(offsets) - 1):
        coef[offsets[s] + 1 : offsets[s + 1]] = mask[offsets[s] + 1 : offsets[s + 1]] / norms[s]
        adv_tok[offsets[s] : offsets[s + 1]] = adv[s]
    old = b.get("old_logprobs")
    loss_tok, _, _ = grpo_token_loss(logp, old if old is not None else logp.detach(), adv_tok, clip_low, clip_high)
    loss = (coef * loss_tok).sum()
    loss.backward()
    tensors = {"logprobs": logp.detach().contiguous()}
    for name, p in lm.named_parameters():
        tensors["grad." + name] = p.grad.detach().contiguous()
    return {"loss": float(loss), "tensors": tensors}


def make(out_dir: str, config: dict, seed: int) -> None:
    """A random model of config["model_type"] (qwen3 by default) written by save_pretrained, with norms away from 1 and
    biases away from 0 (transformers initialises them to 1 and 0), so that their gradients and values matter."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = dict(config)
    model_type = cfg.pop("model_type", "qwen3")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg)).float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.2 * torch.rand_like(p) - 0.1)
            elif n.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out_dir)


def main() -> None:
    from safetensors.torch import save_file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases")
    ap.add_argument("--make")
    ap.add_argument("--make-many")
    ap.add_argument("--config")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if a.make:
        make(a.make, json.loads(a.config), a.seed)
        return
    if a.make_many:
        for m in json.loads(a.make_many):
            make(m["dir"], m["config"], int(m["seed"]))
        return
    with open(a.cases) as f:
        cases = json.load(f)
    for c in cases:
        r = reference(c["model"], c["batch"], float(c["lMax"]), float(c["clipLow"]), float(c["clipHigh"]))
        os.makedirs(c["out"], exist_ok=True)
        save_file(r["tensors"], os.path.join(c["out"], "oracle.safetensors"))
        with open(os.path.join(c["out"], "oracle.json"), "w") as f:
            json.dump({"loss": r["loss"]}, f)


if __name__ == "__main__":
    main()
