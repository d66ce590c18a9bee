#!/usr/bin/env python3
"""Baseline for gpu_driver bench: one GRPO++ training step in PyTorch eager with transformers (bf16 weights,
SDPA attention, gradient checkpointing, AdamW fused=False), same shape and sequence lengths.
Prints tokens/s, MFU (same formula as gpu_driver) and peak memory; writes --json. OOM is recorded, not fatal.
"""
import argparse, json, time
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPES = {"qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072), "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--seq", default="4096")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    cfg = Qwen3Config(vocab_size=151936, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                      max_position_embeddings=40960, rope_theta=1e6, tie_word_embeddings=True, use_sliding_window=False, **SHAPES[a.shape])
    cfg._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16)
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    runs = []
    for T in [int(x) for x in a.seq.split(",")]:
        ids = torch.randint(0, cfg.vocab_size, (1, T), device="cuda")
        def step():
            logits = model(input_ids=ids).logits[0, :-1].float()
            lp = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
            ratio = torch.exp(lp - lp.detach())
            loss = torch.maximum(-ratio, -torch.clamp(ratio, 0.8, 1.28)).sum() / 32768.0
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step(); opt.zero_grad(set_to_none=True)
        try:
            torch.cuda.reset_peak_memory_stats()
            step(); torch.cuda.synchronize()
            t0 = time.time()
            for _ in range(2): step()
            torch.cuda.synchronize()
            dt = (time.time() - t0) / 2
            flops = 6.0 * n_params * T + 6.0 * 28 * 16 * 128 * T * T
            r = dict(seq=T, step_s=dt, tokens_per_s=T / dt, mfu=flops / dt / 989e12, peak_gib=torch.cuda.max_memory_allocated() / 2**30)
            print(f"torch {a.shape} seq {T:6d}  step {dt:.3f} s  {T/dt:9.0f} tok/s  MFU {100*r['mfu']:.1f}%  peak {r['peak_gib']:.1f} GiB", flush=True)
        except torch.OutOfMemoryError as e:
            r = dict(seq=T, error="out of memory"); print(f"torch {a.shape} seq {T}: out of memory", flush=True)
            opt.zero_grad(set_to_none=True); torch.cuda.empty_cache()
        runs.append(r)
    if a.json:
        json.dump(dict(shape=a.shape, device="cuda", params=n_params, runs=runs), open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
