#!/usr/bin/env python3
"""Checks gpu-learner's backends against PyTorch + transformers (Qwen3ForCausalLM, fp32, eager attention).

The reference is the one test/cpu-heavy/torch-oracle.test.ts and `npm run check:torch` use (gpu-learner/fsdp/swerl_fsdp/
oracle.py: a random model written by save_pretrained; packed log-probs, the GRPO++ loss of DESIGN §5 and every
gradient by autograd on the CPU). This script writes the packed batch for `gpu_driver dump` as well, runs it for
the cuda and cpu backends and compares. Tolerances (reason: bf16 operands vs fp32):
  cpu  vs torch fp32: logp max|Δ| 1e-4, loss rel 1e-4, grad rel-L2 1e-3 (fp32 accumulation order only)
  cuda vs torch fp32: logp max|Δ| 3e-2, loss rel 3e-2, grad rel-L2 6e-2 (bf16 keeps 8 mantissa bits)
Usage: check_torch.py --driver gpu-learner/build-gpu/gpu_driver --out DIR
"""
import argparse, json, os, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fsdp"))
from swerl_fsdp.oracle import make, reference  # noqa: E402

TOL = {"cpu": (1e-4, 1e-4, 1e-3), "cuda": (3e-2, 3e-2, 6e-2)}
L_MAX, CLIP_LOW, CLIP_HIGH = 64.0, 0.2, 0.28
CONFIG = dict(vocab_size=211, hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=False, attention_bias=False, use_sliding_window=False)


def write_batch(bdir, arrays):
    """The batch as gpu_driver dump reads it (one .bin per array) and as the oracle reads it (safetensors)."""
    from safetensors.numpy import save_file

    for name, arr in arrays.items():
        arr.tofile(os.path.join(bdir, name + ".bin"))
    st = {"ids": arrays["ids"], "offsets": arrays["offsets"], "mask": arrays["mask"], "advantages": arrays["adv"]}
    if "old" in arrays:
        st["old_logprobs"] = arrays["old"]
    path = os.path.join(bdir, "batch.safetensors")
    save_file(st, path)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    mdir, bdir = os.path.join(args.out, "model"), os.path.join(args.out, "batch")
    os.makedirs(bdir, exist_ok=True)
    make(mdir, CONFIG, 0)
    rng = np.random.default_rng(1)
    offs = [0, 37, 40, 111]
    ids = rng.integers(0, CONFIG["vocab_size"], offs[-1]).astype(np.int32)
    mask = np.ones(offs[-1], np.float32); mask[50:60] = 0
    adv = np.array([1.0, -0.5, 0.75], np.float32)
    arrays = {"ids": ids, "offsets": np.array(offs, np.int32), "mask": mask, "adv": adv}
    lp0 = reference(mdir, write_batch(bdir, arrays), L_MAX, CLIP_LOW, CLIP_HIGH)["tensors"]["logprobs"].numpy()
    # old log-probs shifted by ±0.4 on two thirds of the tokens: both clip branches and the unclipped one occur
    shift = np.where(np.arange(len(ids)) % 3 == 0, 0.4, np.where(np.arange(len(ids)) % 3 == 1, -0.4, 0.0)).astype(np.float32)
    arrays["old"] = np.minimum(0.0, lp0 - shift).astype(np.float32)
    ref = reference(mdir, write_batch(bdir, arrays), L_MAX, CLIP_LOW, CLIP_HIGH)
    loss = ref["loss"]
    ref_grads = {n[len("grad."):]: t.numpy().ravel() for n, t in ref["tensors"].items() if n.startswith("grad.")}
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
        e_loss = abs(res["loss"] - loss) / max(1e-12, abs(loss))
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
