"""Renders conversations with transformers' apply_chat_template, the reference our renderer (lib/tokenizer.ts)
is held to byte for byte (scripts/checks/chat-templates.ts), and tokenizes texts with the model's tokenizer.

Usage: python chat_templates.py MODEL_DIR CASES_JSON OUT_JSON
CASES_JSON: {"cases": [{"messages", "tools"?, "addGenerationPrompt"}], "texts": [str]}
OUT_JSON: {"renders": [str | {"error": str}], "ids": [[int]], "transformers": version}
"""
import json
import sys

import transformers
from transformers import AutoTokenizer


def main() -> None:
    model_dir, cases_path, out_path = sys.argv[1:4]
    tok = AutoTokenizer.from_pretrained(model_dir)
    with open(cases_path) as f:
        doc = json.load(f)
    renders = []
    for c in doc["cases"]:
        try:
            renders.append(
                tok.apply_chat_template(c["messages"], tools=c.get("tools"), add_generation_prompt=c["addGenerationPrompt"], tokenize=False)
            )
        except Exception as e:  # a template that raises is a result to compare, not a crash of the check
            renders.append({"error": f"{type(e).__name__}: {e}"})
    ids = [tok.encode(t, add_special_tokens=False) for t in doc.get("texts", [])]
    with open(out_path, "w") as f:
        json.dump({"renders": renders, "ids": ids, "transformers": transformers.__version__}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
