#!/usr/bin/env python3
"""Checks gpu-learner's backends against PyTorch + transformers (Qwen3ForCausalLM, fp32, eager attention).

Builds a random Qwen3 config, save_pretrained (safetensors), writes a packed batch (.bin), runs
`gpu_driver dump` for the cuda and cpu backends, recomputes log-probs and the GRPO++ loss gradient with
autograd on the same formula (DESIGN §5), and compares. Tolerances (reason: bf16 operands vs fp32):
  cpu  vs torch fp32: logp max|Δ| 1e-4, loss rel 1e-4, grad rel-L2 1e-3 (fp32 accumulation order only)
  cuda vs torch fp32: logp max|Δ| 3e-2, loss rel 3e-2, grad rel-L2 6e-2 (bf16 keeps 8 mantissa bits)
Usage: check_torch.py --driver gpu-learner/build-gpu/gpu_driver --out DIR
"""
import argparse, json, os, subprocess, sys
import numpy as np
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

TOL = {"cpu": (1e-4, 1e-4, 1e-3), "cuda": (3e-2, 3e-2, 6e-2)}
L_MAX, CLIP_LOW, CLIP_HIGH = 64.0, 0.2, 0.28


def token_logprobs(model, ids, offs, dev):
    out = torch.zeros(len(ids), dtype=torch.float32, device=dev)
    parts = []
    for s in range(len(offs) - 1):
        a, b = offs[s], offs[s + 1]
        x = torch.tensor(ids[a:b], device=dev)[None]
        logits = model(input_ids=x).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        parts.append((a, b, lp[:-1].gather(1, x[0, 1:, None])[:, 0]))
    for a, b, v in parts:  # first token of each sequence has no prediction: 0
        out = out.index_put((torch.arange(a + 1, b, device=dev),), v)
    return out


def grpo_loss(logp, old, adv_tok, coef):
    ratio = torch.exp(logp - old)
    un = -adv_tok * ratio
    cl = -adv_tok * torch.clamp(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH)
    return (coef * torch.maximum(un, cl)).sum()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=211, hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attention_bias=False, use_sliding_window=False)
    cfg._attn_implementation = "eager"
    model = Qwen3ForCausalLM(cfg).float().to(dev)
    with torch.no_grad():  # perturb norms away from 1 so their gradients matter
        for n, p in model.named_parameters():
            if "norm" in n: p.add_(0.1 * torch.randn_like(p))
    mdir, bdir = os.path.join(args.out, "model"), os.path.join(args.out, "batch")
    os.makedirs(bdir, exist_ok=True)
    model.save_pretrained(mdir, safe_serialization=True)
    rng = np.random.default_rng(1)
    offs = [0, 37, 40, 111]
    ids = rng.integers(0, cfg.vocab_size, offs[-1]).astype(np.int32)
    mask = np.ones(offs[-1], np.float32); mask[50:60] = 0
    adv = np.array([1.0, -0.5, 0.75], np.float32)
    with torch.no_grad():
        lp0 = token_logprobs(model, ids.tolist(), offs, dev).cpu().numpy()
    shift = np.where(np.arange(len(ids)) % 3 == 0, 0.4, np.where(np.arange(len(ids)) % 3 == 1, -0.4, 0.0)).astype(np.float32)
    old = np.minimum(0.0, lp0 - shift).astype(np.float32)
    for name, arr in [("ids", ids), ("offsets", np.array(offs, np.int32)), ("mask", mask), ("adv", adv), ("old", old)]:
        arr.tofile(os.path.join(bdir, name + ".bin"))
    # reference: GRPO++ loss, Σ m·ℓ / (N·L_max), first token of each sequence untrained
    coef = np.zeros(len(ids), np.float32); adv_tok = np.zeros(len(ids), np.float32)
    for s in range(len(offs) - 1):
        coef[offs[s] + 1:offs[s + 1]] = mask[offs[s] + 1:offs[s + 1]] / ((len(offs) - 1) * L_MAX)
        adv_tok[offs[s]:offs[s + 1]] = adv[s]
    model.zero_grad()
    logp = token_logprobs(model, ids.tolist(), offs, dev)
    loss = grpo_loss(logp, torch.tensor(old, device=dev), torch.tensor(adv_tok, device=dev), torch.tensor(coef, device=dev))
    loss.backward()
    ref_grads = {n: p.grad.detach().float().cpu().numpy().ravel() for n, p in model.named_parameters()}
    ok = True
    for backend in ("cpu", "cuda"):
        odir = os.path.join(args.out, "dump-" + backend)
        r = subprocess.run([args.driver, "dump", mdir, bdir, odir, "--device", backend, "--l-max", str(int(L_MAX))], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{backend}: gpu_driver dump failed: {r.stderr.strip()}"); ok = False; continue
        res = json.load(open(os.path.join(odir, "result.json")))
        tl, tloss, tg = TOL[backend]
        glp = np.fromfile(os.path.join(odir, "logprobs.bin"), np.float32)
        e_lp = float(np.abs(glp - lp0).max())
        e_loss = abs(res["loss"] - loss.item()) / max(1e-12, abs(loss.item()))
        worst = (0.0, "")
        for n in res["params"]:
            g = np.fromfile(os.path.join(odir, "grads", n + ".bin"), np.float32)
            ref = ref_grads.get(n)
            if ref is None: print(f"{backend}: no torch gradient for {n}"); ok = False; continue
            e = float(np.linalg.norm(g - ref) / max(1e-30, np.linalg.norm(ref)))
            if e > worst[0]: worst = (e, n)
        good = e_lp <= tl and e_loss <= tloss and worst[0] <= tg
        ok &= good
        print(f"{backend}: logp max|diff| {e_lp:.2e} (tol {tl:.0e})  loss rel {e_loss:.2e} (tol {tloss:.0e})  "
              f"worst grad rel-L2 {worst[0]:.2e} {worst[1]} (tol {tg:.0e})  {'ok' if good else 'FAIL'}")
    print("TORCH CHECK PASS" if ok else "TORCH CHECK FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
