// The Qwen3 model as Hugging Face describes it: the config.json fields that fix the model, and its
// tensor table (names and shapes in gpu-learner's allocation order, gpu-learner/src/layout.cpp).
// Pure: no I/O, so checkpoint writers, presets and the learner's TypeScript API share it.

/** The fields of a Qwen3 config.json that fix the model (transformers' Qwen3Config names). */
export interface Qwen3ModelConfig {
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  /** read from the config, never derived from hidden_size */
  head_dim: number;
  rms_norm_eps: number;
  rope_theta: number;
  max_position_embeddings?: number;
  tie_word_embeddings?: boolean;
  attention_bias?: boolean;
}

/** A Qwen3 config.json as read: the model fields plus whatever else the file holds (kept verbatim). */
export interface QwenConfig extends Qwen3ModelConfig {
  [key: string]: unknown;
}

/** Hugging Face Qwen3 tensor names and shapes, in the learner's order (optimizer.bin depends on it). */
export function qwen3TensorShapes(c: Qwen3ModelConfig): [string, number[]][] {
  const C = c.hidden_size,
    V = c.vocab_size,
    I = c.intermediate_size,
    D = c.head_dim;
  const QD = c.num_attention_heads * D,
    KD = c.num_key_value_heads * D;
  const out: [string, number[]][] = [['model.embed_tokens.weight', [V, C]]];
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    out.push([p + 'input_layernorm.weight', [C]], [p + 'self_attn.q_proj.weight', [QD, C]]);
    if (c.attention_bias) out.push([p + 'self_attn.q_proj.bias', [QD]]);
    out.push([p + 'self_attn.k_proj.weight', [KD, C]]);
    if (c.attention_bias) out.push([p + 'self_attn.k_proj.bias', [KD]]);
    out.push([p + 'self_attn.v_proj.weight', [KD, C]]);
    if (c.attention_bias) out.push([p + 'self_attn.v_proj.bias', [KD]]);
    out.push([p + 'self_attn.o_proj.weight', [C, QD]]);
    if (c.attention_bias) out.push([p + 'self_attn.o_proj.bias', [C]]);
    out.push(
      [p + 'self_attn.q_norm.weight', [D]],
      [p + 'self_attn.k_norm.weight', [D]],
      [p + 'post_attention_layernorm.weight', [C]],
      [p + 'mlp.gate_proj.weight', [I, C]],
      [p + 'mlp.up_proj.weight', [I, C]],
      [p + 'mlp.down_proj.weight', [C, I]],
    );
  }
  out.push(['model.norm.weight', [C]]);
  if (!c.tie_word_embeddings) out.push(['lm_head.weight', [V, C]]);
  return out;
}
