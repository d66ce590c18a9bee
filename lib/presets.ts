// The tiny Qwen3 model presets of the tests and demos (DESIGN §6): a shape and a tokenizer each
// (lib/preset-tokenizers.ts), and the config.json they give. lib/model-init.ts writes checkpoint 0 of one.
import { decoderTensorShapes, type Qwen3ModelConfig } from './qwen3.ts';
import { frozenLakeRowsTokenizer, frozenLakeTokenizer, tinyTokenizer, type TokenizerFiles } from './preset-tokenizers.ts';

export { decoderTensorShapes };

/** The Qwen3 `config.json` fields we write (transformers' Qwen3Config names). */
export interface Qwen3Config extends Qwen3ModelConfig {
  architectures: ['Qwen3ForCausalLM'];
  model_type: 'qwen3';
  hidden_act: 'silu';
  max_position_embeddings: number;
  rope_scaling: null;
  tie_word_embeddings: boolean;
  attention_bias: boolean;
  attention_dropout: number;
  initializer_range: number;
  use_cache: boolean;
  use_sliding_window: boolean;
  sliding_window: null;
  max_window_layers: number;
  torch_dtype: 'float32';
  bos_token_id: number;
  eos_token_id: number;
  pad_token_id: number;
  transformers_version: string;
}

export type PresetName = 'tiny' | 'frozenlake' | 'frozenlake32' | 'frozenlake32-tied' | 'frozenlake-rows';
export const PRESET_NAMES: readonly PresetName[] = ['tiny', 'frozenlake', 'frozenlake32', 'frozenlake32-tied', 'frozenlake-rows'];

/** The Qwen3 fields a preset fixes (its tokenizer gives the vocabulary). */
type ModelShape = Required<
  Pick<
    Qwen3ModelConfig,
    'hidden_size' | 'intermediate_size' | 'num_hidden_layers' | 'num_attention_heads' | 'num_key_value_heads' | 'head_dim' | 'tie_word_embeddings' | 'max_position_embeddings'
  >
>;

export interface Preset {
  name: PresetName;
  description: string;
  shape: ModelShape;
  tokenizer(): TokenizerFiles;
  /** RoPE base (config.json `rope_theta`); default Qwen3's 1e6 */
  ropeTheta?: number;
}

/** frozenlake's shape, which frozenlake-rows shares (only the tokenizer and RoPE base differ). */
const FROZENLAKE_SHAPE: ModelShape = {
  hidden_size: 64,
  intermediate_size: 192,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  tie_word_embeddings: false,
  max_position_embeddings: 4096,
};

/** frozenlake32's shape; frozenlake32-tied differs only in the tied LM head. */
const FROZENLAKE32_SHAPE: ModelShape = {
  hidden_size: 64,
  intermediate_size: 192,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 32,
  tie_word_embeddings: false,
  max_position_embeddings: 32768,
};

export const PRESETS: Readonly<Record<PresetName, Preset>> = Object.freeze({
  tiny: {
    name: 'tiny',
    description: 'byte-level BPE (512 tokens), hidden 128, 4 layers, GQA 4/2, tied LM head',
    shape: {
      hidden_size: 128,
      intermediate_size: 384,
      num_hidden_layers: 4,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      head_dim: 32,
      tie_word_embeddings: true,
      max_position_embeddings: 4096,
    },
    tokenizer: tinyTokenizer,
  },
  frozenlake: {
    name: 'frozenlake',
    description: 'ASCII character vocabulary with single-token actions L D R U, hidden 64, 2 layers, GQA 4/2, untied LM head',
    shape: FROZENLAKE_SHAPE,
    tokenizer: frozenLakeTokenizer,
  },
  // The demo's preset (configs/frozenlake.json, docs/benchmarks.md): frozenlake's shape, a map row per token, and
  // RoPE θ 10 so a head of 16 dimensions tells apart the few positions between the grid and the reply (at θ 1e6 only
  // 2 of its 8 frequencies turn by more than a radian within 20 tokens). With the character grid at θ 1e6 even
  // behaviour cloning of the shortest paths stayed at 73% greedy after 40 steps; RL did not read the map at all.
  'frozenlake-rows': {
    name: 'frozenlake-rows',
    description: 'frozenlake with one token per row of up to 3 map cells and RoPE θ 10 (the demo: 3×3 maps), hidden 64, 2 layers, GQA 4/2, untied LM head',
    shape: FROZENLAKE_SHAPE,
    tokenizer: frozenLakeRowsTokenizer,
    ropeTheta: 10,
  },
  // vLLM's CPU attention takes head sizes 32, 64, 80, ... only (frozenlake's 16 kills its engine on the first request)
  frozenlake32: {
    name: 'frozenlake32',
    description:
      "frozenlake with head_dim 32 (a size vLLM's CPU attention serves) and 32,768 positions (a SWE prompt in its character vocabulary), hidden 64, 2 layers, GQA 4/2, untied LM head",
    shape: FROZENLAKE32_SHAPE,
    tokenizer: frozenLakeTokenizer,
  },
  'frozenlake32-tied': {
    name: 'frozenlake32-tied',
    description: 'frozenlake32 with the LM head tied to the embeddings (as Qwen3-0.6B/1.7B/4B)',
    shape: { ...FROZENLAKE32_SHAPE, tie_word_embeddings: true },
    tokenizer: frozenLakeTokenizer,
  },
});

export function getPreset(name: string): Preset {
  if (!(PRESET_NAMES as readonly string[]).includes(name)) throw new Error(`preset: unknown preset ${JSON.stringify(name)} (expected one of ${PRESET_NAMES.join(', ')})`);
  return PRESETS[name as PresetName];
}

export function presetConfig(preset: Preset, tok: TokenizerFiles = preset.tokenizer()): Qwen3Config {
  const s = preset.shape;
  return {
    architectures: ['Qwen3ForCausalLM'],
    model_type: 'qwen3',
    vocab_size: tok.vocabSize,
    hidden_size: s.hidden_size,
    intermediate_size: s.intermediate_size,
    num_hidden_layers: s.num_hidden_layers,
    num_attention_heads: s.num_attention_heads,
    num_key_value_heads: s.num_key_value_heads,
    head_dim: s.head_dim,
    hidden_act: 'silu',
    max_position_embeddings: s.max_position_embeddings,
    rms_norm_eps: 1e-6,
    rope_theta: preset.ropeTheta ?? 1e6,
    rope_scaling: null,
    tie_word_embeddings: s.tie_word_embeddings,
    attention_bias: false,
    attention_dropout: 0,
    initializer_range: 0.02,
    use_cache: true,
    use_sliding_window: false,
    sliding_window: null,
    max_window_layers: s.num_hidden_layers,
    torch_dtype: 'float32',
    bos_token_id: tok.ids.endOfText,
    eos_token_id: tok.ids.imEnd,
    pad_token_id: tok.ids.endOfText,
    transformers_version: '4.51.0',
  };
}
