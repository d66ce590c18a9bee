// The decoder family gpu-learner runs (Qwen3, Qwen2, Llama, Mistral) as Hugging Face describes it: the config.json
// fields that fix the model, and its tensor table (names and shapes in gpu-learner's allocation order,
// gpu-learner/src/layout.cpp). Pure: no I/O, so checkpoint writers, presets and the learner's TypeScript API share it.

/** config.json `model_type` of each architecture and its `architectures[0]` class. */
export const DECODER_ARCHITECTURES = {
  qwen3: 'Qwen3ForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  llama: 'LlamaForCausalLM',
  mistral: 'MistralForCausalLM',
} as const;
export type DecoderArchitecture = keyof typeof DECODER_ARCHITECTURES;

/** The fields of a config.json that fix the model (transformers' config names; Qwen3's when absent). */
export interface Qwen3ModelConfig {
  /** default qwen3 */
  model_type?: DecoderArchitecture;
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  /** Qwen3 requires it; Llama, Qwen2 and Mistral derive hidden_size / num_attention_heads when absent */
  head_dim?: number;
  rms_norm_eps: number;
  rope_theta: number;
  max_position_embeddings?: number;
  tie_word_embeddings?: boolean;
  /** q/k/v/o biases (qwen3, llama); qwen2 has q/k/v biases and no o bias whatever this says, mistral none */
  attention_bias?: boolean;
}

/** A config.json as read: the model fields plus whatever else the file holds (kept verbatim). */
export interface QwenConfig extends Qwen3ModelConfig {
  [key: string]: unknown;
}

/** The architecture's switches: per-head q/k RMSNorm, q/k/v biases, o_proj bias (gpu-learner/src/config.cpp). */
export function decoderFeatures(c: Qwen3ModelConfig): { qkNorm: boolean; qkvBias: boolean; oBias: boolean } {
  const arch = c.model_type ?? 'qwen3';
  const attentionBias = (arch === 'qwen3' || arch === 'llama') && !!c.attention_bias;
  return { qkNorm: arch === 'qwen3', qkvBias: arch === 'qwen2' || attentionBias, oBias: attentionBias };
}

/** Hugging Face tensor names and shapes, in the learner's order (optimizer.bin depends on it). */
export function decoderTensorShapes(c: Qwen3ModelConfig): [string, number[]][] {
  const C = c.hidden_size,
    V = c.vocab_size,
    I = c.intermediate_size,
    D = c.head_dim ?? c.hidden_size / c.num_attention_heads;
  const QD = c.num_attention_heads * D,
    KD = c.num_key_value_heads * D;
  const f = decoderFeatures(c);
  const out: [string, number[]][] = [['model.embed_tokens.weight', [V, C]]];
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    out.push([p + 'input_layernorm.weight', [C]], [p + 'self_attn.q_proj.weight', [QD, C]]);
    if (f.qkvBias) out.push([p + 'self_attn.q_proj.bias', [QD]]);
    out.push([p + 'self_attn.k_proj.weight', [KD, C]]);
    if (f.qkvBias) out.push([p + 'self_attn.k_proj.bias', [KD]]);
    out.push([p + 'self_attn.v_proj.weight', [KD, C]]);
    if (f.qkvBias) out.push([p + 'self_attn.v_proj.bias', [KD]]);
    out.push([p + 'self_attn.o_proj.weight', [C, QD]]);
    if (f.oBias) out.push([p + 'self_attn.o_proj.bias', [C]]);
    if (f.qkNorm) out.push([p + 'self_attn.q_norm.weight', [D]], [p + 'self_attn.k_norm.weight', [D]]);
    out.push([p + 'post_attention_layernorm.weight', [C]], [p + 'mlp.gate_proj.weight', [I, C]], [p + 'mlp.up_proj.weight', [I, C]], [p + 'mlp.down_proj.weight', [C, I]]);
  }
  out.push(['model.norm.weight', [C]]);
  if (!c.tie_word_embeddings) out.push(['lm_head.weight', [V, C]]);
  return out;
}
