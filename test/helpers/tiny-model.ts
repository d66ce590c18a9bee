// The tiny models of the native engine's tests: one config and one set of GRPO++ hyperparameters, each test
// naming only what it changes.
import type { QwenConfig, TrainHyper } from '../../gpu-learner/index.ts';

/** 2 layers, hidden 32, 4 heads over 2 KV heads of 12, vocab 64: milliseconds a step on one thread. */
export function tinyModelConfig(over: Partial<QwenConfig> = {}): QwenConfig {
  return {
    vocab_size: 64,
    hidden_size: 32,
    intermediate_size: 48,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 12,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: 256,
    ...over,
  };
}

/** GRPO++ at lr 1e-3 with DAPO's clip-higher (0.2 / 0.28), weight decay 0.01, clipped gradient norm 1. */
export function trainHyper(over: Partial<TrainHyper> = {}): TrainHyper {
  return { lr: 1e-3, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, clipLow: 0.2, clipHigh: 0.28, maxGradNorm: 1, lMax: 16, mode: 'grpo++', ...over };
}
