"""swerl's FSDP2 learner (DESIGN §6): the GRPO++ step of gpu-learner on a Hugging Face causal LM, sharded
with FSDP2 across a torchrun process group, checkpoints as Hugging Face safetensors."""
