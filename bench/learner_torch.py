"""PyTorch eager side of `npm run bench:learner` (bench/learner.ts): the same checkpoint and shapes as the native
engine, fp32 on the CPU, transformers' causal LM of the checkpoint (Qwen3, Qwen2, Llama) with SDPA attention.
  forward:  log-probs of a batch of equal-length sequences (inference mode)
  train:    the GRPO++ step the native trainStep takes (log-probs, clipped ratio loss over N·L_max, backward,
            gradient-norm clip, AdamW)
  generate: a KV-cache sampling loop (temperature 1) from a 16-token prompt
  --streams 1,8,16: the same loop for n prompts as one batch (wall clock), beside the native batched decoder
Rates are tokens per CPU-second with one thread (robust to other load on the machine), tokens per wall second
otherwise. Prints one JSON object.
"""
import argparse, json, time

import torch
from transformers import AutoModelForCausalLM, DynamicCache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--seqs", type=int, required=True)
    ap.add_argument("--gen", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--ops", default="forward,train,generate")
    ap.add_argument("--streams", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.float32, attn_implementation="sdpa")
    V = model.config.vocab_size
    ids = torch.randint(0, V, (a.seqs, a.seq))
    mask = (torch.arange(a.seq) >= 64).float().expand(a.seqs, a.seq)[:, 1:]
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(a.seqs)])[:, None]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)

    def logprobs():
        logits = model(input_ids=ids).logits[:, :-1]
        return torch.log_softmax(logits, -1).gather(2, ids[:, 1:, None])[..., 0]

    def forward():
        with torch.inference_mode():
            logprobs()
        return ids.numel()

    def train():
        lp = logprobs()
        ratio = torch.exp(lp - lp.detach())
        loss = (torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28)) * mask).sum() / (a.seqs * 32768.0)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return ids.numel()

    def generate(n=1):
        with torch.inference_mode():
            cache = DynamicCache()
            prompts = torch.randint(0, V, (n, 16))
            out = model(input_ids=prompts, past_key_values=cache, use_cache=True)
            for _ in range(a.gen):
                tok = torch.multinomial(torch.softmax(out.logits[:, -1], -1), 1)
                out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True)
        return n * a.gen

    def rate(fn):
        fn()  # warm-up
        tokens, w0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            tokens += fn()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if wall >= a.min_seconds:
                return tokens / (cpu if a.threads == 1 else wall)

    res = {op: rate({"forward": forward, "train": train, "generate": generate}[op]) for op in a.ops.split(",") if op}
    for n in [int(x) for x in a.streams.split(",") if x]:
        generate(n)  # warm-up
        tokens, w0 = 0, time.perf_counter()
        while time.perf_counter() - w0 < a.min_seconds:
            tokens += generate(n)
        res[f"streams{n}"] = tokens / (time.perf_counter() - w0)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
