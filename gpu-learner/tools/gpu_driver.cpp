// gpu_driver: checks and benchmark of the CUDA backend, no Node needed. Built with nvcc (GL_CUDA ON) for a GPU, and
// against the test-only emulator (gpu-learner/emu, GL_CUDA_EMU) as gpu_driver_emu_{bf16,exact,asan} for CI.
//   gpu_driver tiny DIR [--seed S] [--vocab V] [--hidden C] [--inter I] [--layers L] [--heads H] [--kv K] [--head-dim D]
//                       [--tied 0|1] [--bias 0|1] [--max-pos P] [--theta R] [--arch qwen3|qwen2|llama]   a random checkpoint
//   gpu_driver compare DIR [--steps N] [--lens 37,3,71|0*200,...] [--micro T] [--mode grpo++|grpo] [--logits-budget N]
//                       [--gen N] [--lr X] [--tol gpu|bf16|exact] [--stop-on-fail 1] [--json FILE]
//       CUDA vs CPU backend: log-probs, loss, every gradient, N AdamW steps, greedy and sampled generation
//   gpu_driver reject DIR --lens ...        both backends must refuse the batch with the same message
//   gpu_driver leaks BAD_DIR GOOD_DIR       constructor failures and destruction release every stream, handle and byte (emulator)
//   gpu_driver shape --shape qwen3-0.6b --seq 32768 [--json FILE]   train step, log-probs and generation at full scale
//                                           on zero weights (no checkpoint); with GL_EMU_DRY=1 nothing is computed
//   gpu_driver dump DIR BATCH_DIR OUT_DIR [--device D]   reads ids/offsets/mask/adv/old (.bin) from BATCH_DIR, writes logprobs, loss, grads
//   gpu_driver bench --shape qwen3-0.6b|qwen3-1.7b --seq 4096,16384,32768 [--device cuda] [--dir TMP] [--json FILE]
// Exit status 0 = all within tolerance, 1 = a check failed or an error, 2 = usage.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "cuda_engine.h"
#include "gl/config.h"
#include "gl/engine.h"
#include "gl/layout.h"
#include "gl/safetensors.h"
#include "gl/sampling.h"
#ifdef GL_CUDA_EMU
#include "gl_emu_api.h"
#endif

using namespace gl;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opt;
  std::string get(const std::string& k, const std::string& d) const { auto it = opt.find(k); return it == opt.end() ? d : it->second; }
  int64_t num(const std::string& k, int64_t d) const { auto it = opt.find(k); return it == opt.end() ? d : std::atoll(it->second.c_str()); }
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 2; i < argc; i++) {
    if (!std::strncmp(argv[i], "--", 2) && i + 1 < argc) { a.opt[argv[i] + 2] = argv[i + 1]; i++; }
    else a.pos.push_back(argv[i]);
  }
  return a;
}

void mkdirs(const std::string& d) {
  std::string cur;
  for (size_t i = 0; i <= d.size(); i++) {
    if ((i == d.size() || d[i] == '/') && !cur.empty()) ::mkdir(cur.c_str(), 0755);
    if (i < d.size()) cur += d[i];
  }
}

std::unique_ptr<Engine> make(const std::string& device, const std::string& dir, const EngineOptions& eo) {
  return device == "cuda" ? make_cuda_engine(dir, eo) : make_engine(device, dir, eo);
}

struct Shape {
  int64_t vocab, hidden, inter, layers, heads, kv, head_dim;
  bool tied, bias;  // bias: attention_bias (qwen3, llama); qwen2 has q/k/v biases whatever it says
  double theta;
  int64_t max_pos;
  std::string arch = "qwen3";  // qwen3 | qwen2 | llama
};

Shape named_shape(const std::string& n) {
  if (n == "qwen3-0.6b") return {151936, 1024, 3072, 28, 16, 8, 128, true, false, 1e6, 40960};
  if (n == "qwen3-1.7b") return {151936, 2048, 6144, 28, 16, 8, 128, true, false, 1e6, 40960};
  if (n == "qwen2.5-coder-0.5b") return {151936, 896, 4864, 24, 14, 2, 64, false, false, 1e6, 32768, "qwen2"};
  if (n == "smollm2-135m") return {49152, 576, 1536, 30, 9, 3, 64, true, false, 1e5, 8192, "llama"};
  throw std::invalid_argument("--shape must be qwen3-0.6b, qwen3-1.7b, qwen2.5-coder-0.5b or smollm2-135m, got " + n);
}

std::string config_json(const Shape& s) {
  const std::string cls = s.arch == "qwen3" ? "Qwen3ForCausalLM" : s.arch == "qwen2" ? "Qwen2ForCausalLM" : s.arch == "llama" ? "LlamaForCausalLM" : "";
  if (cls.empty()) throw std::invalid_argument("--arch must be qwen3, qwen2 or llama, got " + s.arch);
  char cfg[1024];
  std::snprintf(cfg, sizeof cfg,
                "{\"architectures\":[\"%s\"],\"model_type\":\"%s\",\"vocab_size\":%lld,\"hidden_size\":%lld,"
                "\"intermediate_size\":%lld,\"num_hidden_layers\":%lld,\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,"
                "\"head_dim\":%lld,\"rms_norm_eps\":1e-06,\"rope_theta\":%g,\"max_position_embeddings\":%lld,"
                "\"tie_word_embeddings\":%s%s,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}\n",
                cls.c_str(), s.arch.c_str(), (long long)s.vocab, (long long)s.hidden, (long long)s.inter, (long long)s.layers, (long long)s.heads, (long long)s.kv,
                (long long)s.head_dim, s.theta, (long long)s.max_pos, s.tied ? "true" : "false",
                s.arch == "qwen2" ? "" : s.bias ? ",\"attention_bias\":true" : ",\"attention_bias\":false");
  return cfg;
}

// Random checkpoint at a real model's scale: embeddings uniform with std 0.02 (Qwen3's initializer_range; with a
// tied head they are also the LM head, and ±0.5 made logits 25× too large for bf16 to be compared at a fixed
// tolerance), linear weights uniform(−a, a), a = 0.5/sqrt(fan_in), norm weights around 1.
void write_checkpoint(const std::string& dir, const Shape& s, uint64_t seed) {
  mkdirs(dir);
  atomic_write_file(dir + "/config.json", config_json(s));
  Rng r(seed);
  std::vector<std::vector<float>> store;
  std::vector<TensorView> views;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale, double center) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    store.emplace_back(size_t(n));
    for (auto& x : store.back()) x = float(center + scale * (r.uniform() * 2 - 1));
    views.push_back({name, shape, nullptr});
  };
  const int64_t C = s.hidden, QD = s.heads * s.head_dim, KD = s.kv * s.head_dim;
  const bool qkv_bias = s.bias || s.arch == "qwen2", o_bias = s.bias && s.arch != "qwen2", qk_norm = s.arch == "qwen3";
  const double wc = 0.5 / std::sqrt(double(C)), emb = 0.02 * std::sqrt(3.0);
  add("model.embed_tokens.weight", {s.vocab, C}, emb, 0);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, 0.1, 1);
    add(p + "self_attn.q_proj.weight", {QD, C}, wc, 0);
    if (qkv_bias) add(p + "self_attn.q_proj.bias", {QD}, 0.05, 0);
    add(p + "self_attn.k_proj.weight", {KD, C}, wc, 0);
    if (qkv_bias) add(p + "self_attn.k_proj.bias", {KD}, 0.05, 0);
    add(p + "self_attn.v_proj.weight", {KD, C}, wc, 0);
    if (qkv_bias) add(p + "self_attn.v_proj.bias", {KD}, 0.05, 0);
    add(p + "self_attn.o_proj.weight", {C, QD}, 0.5 / std::sqrt(double(QD)), 0);
    if (o_bias) add(p + "self_attn.o_proj.bias", {C}, 0.05, 0);
    if (qk_norm) {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.1, 1);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.1, 1);
    }
    add(p + "post_attention_layernorm.weight", {C}, 0.1, 1);
    add(p + "mlp.gate_proj.weight", {s.inter, C}, wc, 0);
    add(p + "mlp.up_proj.weight", {s.inter, C}, wc, 0);
    add(p + "mlp.down_proj.weight", {C, s.inter}, 0.5 / std::sqrt(double(s.inter)), 0);
  }
  add("model.norm.weight", {C}, 0.1, 1);
  if (!s.tied) add("lm_head.weight", {s.vocab, C}, wc, 0);
  for (size_t i = 0; i < views.size(); i++) views[i].data = store[i].data();
  write_safetensors_f32(dir + "/model.safetensors", views);
}

// ---- comparison metrics ----

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) { num += double(a[i] - b[i]) * (a[i] - b[i]); den += double(b[i]) * b[i]; }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num) / std::sqrt(den);
}
double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::isnan(a[i] - b[i]) ? INFINITY : double(std::fabs(a[i] - b[i])));
  return m;
}
double rms(const std::vector<float>& a) {
  double s = 0;
  for (float x : a) s += double(x) * x;
  return a.empty() ? 0.0 : std::sqrt(s / double(a.size()));
}

struct Batch {
  std::vector<int32_t> ids, offs;
  std::vector<float> mask, adv, old;
  TrainBatch view() {
    TrainBatch b;
    b.ids = ids.data(); b.n_tokens = int64_t(ids.size()); b.offsets = offs.data(); b.n_seqs = int64_t(offs.size()) - 1;
    b.mask = mask.data(); b.advantages = adv.data(); b.old_logprobs = old.empty() ? nullptr : old.data();
    return b;
  }
};

// "37,0,1,0*200,71": sequence lengths, n*k repeats n k times.
std::vector<int64_t> parse_lens(const std::string& spec) {
  std::vector<int64_t> lens;
  std::stringstream ss(spec);
  for (std::string x; std::getline(ss, x, ',');) {
    const size_t star = x.find('*');
    const int64_t n = std::atoll(x.substr(0, star).c_str()), k = star == std::string::npos ? 1 : std::atoll(x.substr(star + 1).c_str());
    if (n < 0 || k < 1) throw std::invalid_argument("--lens: bad item " + x);
    for (int64_t i = 0; i < k; i++) lens.push_back(n);
  }
  if (lens.empty()) throw std::invalid_argument("--lens is empty");
  return lens;
}

// Packed sequences of the given lengths, a masked token every 13, advantages of both signs.
Batch make_batch(int64_t V, const std::vector<int64_t>& lens) {
  Batch b;
  b.offs = {0};
  for (int64_t n : lens) b.offs.push_back(b.offs.back() + int32_t(n));
  const int64_t T = b.offs.back();
  Rng r(11);
  for (int64_t i = 0; i < T; i++) b.ids.push_back(int32_t(r.next() % uint64_t(V)));
  for (int64_t t = 0; t < T; t++) b.mask.push_back(t % 13 == 5 ? 0.0f : 1.0f);
  const float advs[5] = {1.0f, -0.5f, 0.75f, -1.0f, 0.25f};
  for (size_t s = 0; s < lens.size(); s++) b.adv.push_back(advs[s % 5]);
  return b;
}

// Tolerances, CUDA vs the fp32 CPU reference (derivation in docs/cuda.md). bf16 keeps 8 significant bits: unit
// roundoff u = 2^-8, rms relative error of one rounding σ = u/√6. L layers put about n_f = 2 + 10L roundings on
// the forward path to a logit and n_b = 12L + 6 on the longest forward+backward path to a gradient. A logit's
// error is ≈ σ·S·√n_f, S = sqrt(C)·rms(W_head)·rms(final norm weight) the logit scale.
struct Tol {
  double logp, loss, loss_steps, grad, update;  // nats; relative; relative; relative L2 per tensor; relative L2
  bool same_tokens;                             // generated tokens must agree (no near-ties flip in exact arithmetic)
};
Tol tolerances(const std::string& kind, const QwenConfig& cfg, double S) {
  const double u = 1.0 / 256, L = double(cfg.num_hidden_layers);
  // exact: the emulator with fp32 storage, so both sides are fp32 and only the order of sums differs (cuBLAS vs
  // OpenBLAS blocking, fp32 vs double sums, 32- vs 64-key attention tiles). A log-prob of magnitude < 8 (ln V ≤ 6.2
  // here) carries its own rounding, ulp 4.8e-7, and the order differences on its path, σ·S·√n_f with the fp32
  // σ = 2^-24/√6 (≈ 1e-8·S: negligible): 1e-5 is 20 such ulps. Loss and gradients, relative: n_b order-dependent
  // roundings of relative size 2^-24 each, amplified by the cancellation of sums over tokens (≈ √T, T ≤ 200):
  // √(12L + 6)·√200·2^-24 ≤ 5.5e-6 for L ≤ 3, under 1e-5 (observed ≤ 3e-6).
  // Updates after 10 AdamW steps: Adam divides each element by its own gradient size, so an element whose gradient
  // is near rounding noise moves by up to its learning rate either way: 1e-3 relative L2.
  if (kind == "exact") return {1e-5, 1e-5, 1e-5, 1e-5, 1e-3, true};
  // bf16 (the emulator rounding as the GPU stores bf16) and gpu (an H100: also __expf/rsqrtf ulps, FMA, cuBLAS
  // order; ≪ u). Max over ~100 tokens ≈ 3σ, a log-prob carries ~1.2 logit errors, margin 2: 7.2σ = 2.94u.
  const double m = kind == "gpu" ? 1.5 : kind == "bf16" ? 1.0 : 0.0;
  if (m == 0) throw std::invalid_argument("--tol must be gpu, bf16 or exact, got " + kind);
  const double logp = m * 2.94 * u * S * std::sqrt(2 + 10 * L);
  // loss: ρ = exp(Δlogp), so its relative error is bounded by the log-prob error; over N steps the two
  // trajectories drift apart, ×3. Gradients: 6σ·√n_b (reductions over tokens, e.g. norm weights and biases,
  // cancel and amplify). Updates: Adam normalises each element by its own gradient size, so elements whose
  // gradient is within rounding noise move at random: a loose check of sign and scale (exact mode checks it tightly).
  return {logp, logp, 3 * logp, m * 2.45 * u * std::sqrt(12 * L + 6), 0.5 * m, false};
}

struct Digest {  // FNV-1a over the CUDA side's outputs: reverse order / thread count must not change a bit
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <class T>
  void add(const std::vector<T>& v) { add(v.data(), v.size() * sizeof(T)); }
};

int cmd_compare(const Args& a) {
  const std::string dir = a.pos.at(0);
  const int64_t steps = a.num("steps", 10);
  const std::string tol_kind = a.get("tol",
#ifdef GL_CUDA_EMU
                                     gl_emu::precision()
#else
                                     "gpu"
#endif
  );
  EngineOptions eo;
  eo.logits_budget = a.num("logits-budget", 0);
  auto cpu = make_engine("cpu", dir, eo);
  auto gpu = make_cuda_engine(dir, eo);
  const QwenConfig& cfg = cpu->config();
  const int64_t V = cfg.vocab_size;
  Batch b = make_batch(V, parse_lens(a.get("lens", "37,3,71")));
  Digest dig;
  bool ok = true;
  std::ostringstream js;
  js << "{\"dir\":\"" << dir << "\",\"tol\":\"" << tol_kind << "\",\"checks\":[";
  bool first = true;
  const bool stop_on_fail = a.num("stop-on-fail", 0) != 0;  // mutants: the first failure is enough
  auto report = [&](const std::string& what, double err, double t) {
    const bool pass = std::isfinite(err) && err <= t;
    ok = ok && pass;
    if (!pass && stop_on_fail) {
      std::printf("%-62s %.3e (tol %.1e) FAIL\nCOMPARE FAIL (stopped at the first failure)\n", what.c_str(), err, t);
      std::exit(1);
    }
    std::printf("%-62s %.3e (tol %.1e) %s\n", what.c_str(), err, t, pass ? "ok" : "FAIL");
    js << (first ? "" : ",") << "{\"what\":\"" << what << "\",\"err\":" << (std::isfinite(err) ? err : 1e300) << ",\"tol\":" << t
       << ",\"pass\":" << (pass ? "true" : "false") << "}";
    first = false;
  };
  const auto& head_name = cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const double S = std::sqrt(double(cfg.hidden_size)) * rms(cpu->get_tensor(head_name, false)) * rms(cpu->get_tensor("model.norm.weight", false));
  const Tol tol = tolerances(tol_kind, cfg, S);
  const double tol_logp = tol.logp;
  std::printf("config %s: %s, %lld layers, heads %lld/%lld, head_dim %lld, %s head%s%s%s; %lld tokens in %lld sequences; logit scale S=%.3g\n",
              dir.c_str(), cfg.model_type.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.num_attention_heads, (long long)cfg.num_key_value_heads, (long long)cfg.head_dim,
              cfg.tie_word_embeddings ? "tied" : "untied", cfg.qkv_bias ? ", q/k/v bias" : "", cfg.o_bias ? ", o bias" : "",
              cfg.qk_norm ? ", q/k norm" : "", (long long)b.ids.size(),
              (long long)b.offs.size() - 1, S);
  // CPU log-probs first: old log-probs shifted from them so some tokens take each clip branch
  TrainBatch tb = b.view();
  std::vector<float> lc(b.ids.size()), lg(b.ids.size());
  cpu->logprobs(tb, lc.data());
  b.old = lc;
  for (size_t t = 0; t < b.old.size(); t++) b.old[t] = std::min(0.0f, b.old[t] - (t % 3 == 0 ? 0.4f : t % 3 == 1 ? -0.4f : 0.0f));
  tb = b.view();
  TrainHyper hp;
  hp.l_max = 64;
  // lr near the recipe's 1e-6: over 10 steps no token changes its clip branch, so the two trajectories stay
  // comparable (at 1e-3 bf16 noise flips clipped tokens and the gradients then differ wholesale)
  hp.lr = std::atof(a.get("lr", "1e-5").c_str());
  hp.micro_batch_tokens = a.num("micro", 64);  // several micro-batches: exercises gradient accumulation
  const std::string mode = a.get("mode", "grpo++");
  if (mode != "grpo++" && mode != "grpo") throw std::invalid_argument("--mode must be grpo++ or grpo, got " + mode);
  hp.mode = mode == "grpo" ? LossMode::Grpo : LossMode::GrpoPlusPlus;
  // Loss scale Σ_t coef_t·|A_t| (the loss when every ratio is 1): the loss itself can cancel to ~0.
  double loss_scale = 0;
  {
    const std::vector<double> norms = sequence_loss_norms(tb, hp);
    for (size_t s = 0; s + 1 < b.offs.size(); s++)
      for (int64_t t = b.offs[s] + 1; t < b.offs[s + 1]; t++)
        if (norms[s] > 0) loss_scale += double(b.mask[size_t(t)]) * std::fabs(b.adv[s]) / norms[s];
  }
  auto loss_err = [&](double g, double c) { return std::fabs(g - c) / std::max({std::fabs(c), loss_scale, 1e-30}); };
  // attention launches per layer pass: one per slice of ≤ 65535 sequences, none for an empty micro-batch
  int64_t micro_batches = 0, attn_slices = 0;
  for_micro_batches(tb, hp.micro_batch_tokens, [&](int64_t s0, int64_t s1) {
    if (b.offs[size_t(s1)] == b.offs[size_t(s0)]) return;
    micro_batches++;
    attn_slices += (s1 - s0 + 65534) / 65535;
  });
#ifdef GL_CUDA_EMU
  const int64_t attn0 = gl_emu::launches("attn_fwd_kernel");
#endif
  const double loss_c = cpu->debug_loss(tb, hp, true), loss_g = gpu->debug_loss(tb, hp, true);
#ifdef GL_CUDA_EMU
  // Backward recomputes every layer but the last, which forward has just left in scratch: 2L−1 layer passes.
  const int64_t attn = gl_emu::launches("attn_fwd_kernel") - attn0, want = attn_slices * (2 * cfg.num_hidden_layers - 1);
  report("attention-forward launches in one loss+backward (want " + std::to_string(want) + ")", double(std::llabs(attn - want)), 0);
#endif
  dig.add(&loss_g, sizeof loss_g);
  report("loss relative diff (of max(|loss|, Σ coef·|A|))", loss_err(loss_g, loss_c), tol.loss);
  // log-probs after training on the fresh engine (its first micro-batch may hold only empty sequences)
  gpu->logprobs(tb, lg.data());
  dig.add(lg);
  report("logprobs max|diff| (nats)", max_abs(lg, lc), tol_logp);
  for (auto& p : cpu->params()) {
    auto gg = gpu->get_tensor(p.name, true);
    dig.add(gg);
    report("grad " + p.name, rel_l2(gg, cpu->get_tensor(p.name, true)), tol.grad);
  }
  // generation with the KV cache on the same weights: greedy, then sampled (same seed ⇒ same tokens where logits agree)
  const int64_t n_gen = a.num("gen", 8);
  int64_t greedy_same = 0, sampled_same = 0;
  if (n_gen > 0) {
    const int64_t n_prompt = std::min<int64_t>(20, int64_t(b.ids.size()));
    GenerateOptions go;
    go.max_new_tokens = n_gen;
    go.temperature = 0;
    auto gc = cpu->generate(b.ids.data(), n_prompt, go), gg = gpu->generate(b.ids.data(), n_prompt, go);
    dig.add(gg.ids);
    dig.add(gg.logprobs);
    while (greedy_same < int64_t(gc.ids.size()) && greedy_same < int64_t(gg.ids.size()) && gc.ids[size_t(greedy_same)] == gg.ids[size_t(greedy_same)]) greedy_same++;
    std::vector<float> pc(gc.logprobs.begin(), gc.logprobs.begin() + greedy_same), pg(gg.logprobs.begin(), gg.logprobs.begin() + greedy_same);
    report("generate: log-probs of the common greedy prefix max|diff|", max_abs(pg, pc), tol_logp);
    go.temperature = 0.9;
    go.top_p = 0.95;
    go.seed = 5;
    auto sc = cpu->generate(b.ids.data(), n_prompt, go), sg = gpu->generate(b.ids.data(), n_prompt, go);
    dig.add(sg.ids);
    while (sampled_same < int64_t(sc.ids.size()) && sampled_same < int64_t(sg.ids.size()) && sc.ids[size_t(sampled_same)] == sg.ids[size_t(sampled_same)]) sampled_same++;
    std::printf("generation: greedy %lld of %zu tokens identical, sampled %lld of %zu%s\n", (long long)greedy_same, gc.ids.size(), (long long)sampled_same,
                sc.ids.size(), tol.same_tokens ? "" : " (informational: near-ties may flip under bf16)");
    if (tol.same_tokens) {
      report("generate: greedy tokens differing", double(gc.ids.size() - size_t(greedy_same)), 0);
      report("generate: sampled tokens differing", double(sc.ids.size() - size_t(sampled_same)), 0);
    }
  }
  // AdamW steps
  std::map<std::string, std::vector<float>> w0;
  for (auto& p : cpu->params()) w0[p.name] = cpu->get_tensor(p.name, false);
  double worst_step_loss = 0, worst_clip = 0;
  for (int64_t s = 0; s < steps; s++) {
    // step 1 also reports each trained token's log-prob before it (TrainBatch::logprobs_out), NaN elsewhere
    std::vector<float> sc_lp, sg_lp;
    TrainBatch tbc = tb, tbg = tb;
    if (s == 0) {
      sc_lp.assign(size_t(tb.n_tokens), std::nanf(""));
      sg_lp = sc_lp;
      tbc.logprobs_out = sc_lp.data();
      tbg.logprobs_out = sg_lp.data();
    }
    const TrainStats sc = cpu->train_step(tbc, hp), sg = gpu->train_step(tbg, hp);
    if (s == 0) {
      double worst = 0, pattern = 0;
      for (size_t t = 0; t < sc_lp.size(); t++) {
        if (std::isnan(sc_lp[t]) != std::isnan(sg_lp[t])) pattern++;
        else if (!std::isnan(sc_lp[t])) worst = std::max(worst, double(std::fabs(sg_lp[t] - sc_lp[t])));
      }
      report("step 1: trained tokens' log-probs before it, tokens reported by one backend only", pattern, 0);
      report("step 1: trained tokens' log-probs before it max|diff| (nats)", worst, tol_logp);
    }
    std::printf("step %lld  loss cpu % .6e cuda % .6e  grad_norm cpu %.6e cuda %.6e  clip %.4f/%.4f\n", (long long)s + 1, sc.loss, sg.loss, sc.grad_norm,
                sg.grad_norm, sc.clip_fraction, sg.clip_fraction);
    dig.add(&sg.loss, sizeof sg.loss);
    dig.add(&sg.grad_norm, sizeof sg.grad_norm);
    if (s == 0) report("step 1 grad-norm relative diff", std::fabs(sg.grad_norm - sc.grad_norm) / std::max(1e-12, sc.grad_norm), tol.grad);
    worst_step_loss = std::max(worst_step_loss, loss_err(sg.loss, sc.loss));
    worst_clip = std::max(worst_clip, std::fabs(sg.clip_fraction - sc.clip_fraction));
  }
  if (steps > 0) {
    report("loss relative diff, worst of " + std::to_string(steps) + " steps", worst_step_loss, tol.loss_steps);
    for (auto& p : cpu->params()) {
      auto wc = cpu->get_tensor(p.name, false), wg = gpu->get_tensor(p.name, false);
      dig.add(wg);
      const auto& w = w0[p.name];
      std::vector<float> dc(w.size()), dg(w.size());
      for (size_t i = 0; i < w.size(); i++) { dc[i] = wc[i] - w[i]; dg[i] = wg[i] - w[i]; }
      // The key bias's gradient is a near-cancellation (each query row's score gradients sum to 0, so only the RoPE
      // rotation of the bias is seen): in bf16 it sits within rounding noise, which Adam's per-element normalisation
      // turns into updates of random sign. Its gradient is checked above; its update only in exact mode.
      const bool noise = tol_kind != "exact" && p.name.size() > 11 && p.name.compare(p.name.size() - 11, 11, "k_proj.bias") == 0;
      if (noise) std::printf("update after %lld AdamW steps %s %.3e (informational: gradient within bf16 noise)\n", (long long)steps, p.name.c_str(), rel_l2(dg, dc));
      else report("update after " + std::to_string(steps) + " AdamW steps " + p.name, rel_l2(dg, dc), tol.update);
    }
  }
  char dg[32];
  std::snprintf(dg, sizeof dg, "%016llx", (unsigned long long)dig.h);
  js << "],\"logit_scale\":" << S << ",\"greedy_same\":" << greedy_same << ",\"sampled_same\":" << sampled_same << ",\"generated\":" << n_gen
     << ",\"micro_batches\":" << micro_batches << ",\"digest\":\"" << dg << "\"";
#ifdef GL_CUDA_EMU
  js << ",\"emu\":{\"precision\":\"" << gl_emu::precision() << "\",\"reverse\":" << (gl_emu::reverse_order() ? "true" : "false")
     << ",\"asan\":" << (gl_emu::asan() ? "true" : "false") << ",\"stats\":" << gl_emu::stats_json() << "}";
#endif
  js << ",\"pass\":" << (ok ? "true" : "false") << "}\n";
  const std::string out = a.get("json", "");
  if (!out.empty()) atomic_write_file(out, js.str());
  std::printf("digest %s\n%s\n", dg, ok ? "COMPARE PASS" : "COMPARE FAIL");
  return ok ? 0 : 1;
}

// Both backends must refuse the batch (log-probs and a training step) with the same message.
int cmd_reject(const Args& a) {
  const std::string dir = a.pos.at(0);
  auto cpu = make_engine("cpu", dir, EngineOptions{});
  auto gpu = make_cuda_engine(dir, EngineOptions{});
  Batch b = make_batch(cpu->config().vocab_size, parse_lens(a.get("lens", "")));
  TrainBatch tb = b.view();
  TrainHyper hp;
  bool ok = true;
  auto msg = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  std::vector<float> out(b.ids.size());
  const std::string lc = msg([&] { cpu->logprobs(tb, out.data()); }), lg = msg([&] { gpu->logprobs(tb, out.data()); });
  const std::string tc = msg([&] { cpu->train_step(tb, hp); }), tg = msg([&] { gpu->train_step(tb, hp); });
  std::printf("cpu logprobs:  %s\ncuda logprobs: %s\ncpu train:     %s\ncuda train:    %s\n", lc.c_str(), lg.c_str(), tc.c_str(), tg.c_str());
  ok = !lc.empty() && lc == lg && !tc.empty() && tc == tg;
  std::printf("%s\n", ok ? "REJECT PASS" : "REJECT FAIL");
  return ok ? 0 : 1;
}

#ifdef GL_CUDA_EMU
// A constructor that throws after creating its stream and cuBLAS handle must release them; so must destruction.
int cmd_leaks(const Args& a) {
  const std::string bad = a.pos.at(0), good = a.pos.at(1);
  int threw = 0;
  for (int i = 0; i < 3; i++) {
    try {
      make_cuda_engine(bad, EngineOptions{});
    } catch (const std::exception& e) {
      if (!i) std::printf("load failed as intended: %s\n", e.what());
      threw++;
    }
  }
  gl_emu::Live after_fail = gl_emu::live();
  { auto e = make_cuda_engine(good, EngineOptions{}); }
  gl_emu::Live after_good = gl_emu::live();
  std::printf("after 3 failed loads: %d streams, %d cuBLAS handles, %zu allocations (%zu bytes)\n", after_fail.streams, after_fail.blas_handles,
              after_fail.allocations, after_fail.bytes);
  std::printf("after a good engine is destroyed: %d streams, %d cuBLAS handles, %zu allocations (%zu bytes)\n", after_good.streams,
              after_good.blas_handles, after_good.allocations, after_good.bytes);
  const bool ok = threw == 3 && !after_fail.streams && !after_fail.blas_handles && !after_fail.allocations && !after_good.streams &&
                  !after_good.blas_handles && !after_good.allocations;
  std::printf("%s\n", ok ? "LEAKS PASS" : "LEAKS FAIL");
  return ok ? 0 : 1;
}
#endif

// Full-scale train step, log-probs and generation on a shape-only engine (zero weights, no checkpoint on disk).
int cmd_shape(const Args& a) {
  const std::string shape_name = a.get("shape", "qwen3-0.6b");
  const int64_t T = a.num("seq", 32768);
  const QwenConfig cfg = parse_config(config_json(named_shape(shape_name)), "<" + shape_name + ">");
  const double t0 = now();
  auto eng = make_cuda_engine_for_shape(cfg, EngineOptions{});
  Rng r(3);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& x : ids) x = int32_t(r.next() % uint64_t(cfg.vocab_size));
  std::vector<int32_t> offs = {0, int32_t(T)};
  std::vector<float> mask(size_t(T), 1.0f), adv = {1.0f}, lp(static_cast<size_t>(T));
  TrainBatch b;
  b.ids = ids.data(); b.n_tokens = T; b.offsets = offs.data(); b.n_seqs = 1; b.mask = mask.data(); b.advantages = adv.data();
  TrainHyper hp;
  hp.micro_batch_tokens = T;
  eng->train_step(b, hp);
  eng->logprobs(b, lp.data());
  GenerateOptions go;
  go.max_new_tokens = 4;
  go.temperature = 0;
  eng->generate(ids.data(), T - 8, go);
  const double dt = now() - t0, peak = double(cuda_memory_stats().peak) / double(1ull << 30);
  std::printf("%s, one %lld-token sequence: train step + log-probs + generation in %.1f s; engine device memory peak %.2f GiB\n", shape_name.c_str(),
              (long long)T, dt, peak);
  std::ostringstream js;
  js << "{\"shape\":\"" << shape_name << "\",\"seq\":" << T << ",\"seconds\":" << dt << ",\"peak_gib\":" << peak;
#ifdef GL_CUDA_EMU
  js << ",\"dry\":" << (gl_emu::dry_run() ? "true" : "false") << ",\"emu\":" << gl_emu::stats_json();
#endif
  js << "}\n";
  const std::string out = a.get("json", "");
  if (!out.empty()) atomic_write_file(out, js.str());
  std::printf("SHAPE PASS\n");
  return 0;
}

template <typename T>
std::vector<T> read_bin(const std::string& path) {
  std::string s = read_file(path);
  if (s.size() % sizeof(T)) throw std::runtime_error(path + ": size not a multiple of " + std::to_string(sizeof(T)));
  std::vector<T> v(s.size() / sizeof(T));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}
template <typename T>
void write_bin(const std::string& path, const std::vector<T>& v) {
  atomic_write_file(path, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
}

int cmd_dump(const Args& a) {
  const std::string dir = a.pos.at(0), in = a.pos.at(1), out = a.pos.at(2);
  mkdirs(out + "/grads");
  auto eng = make(a.get("device", "cuda"), dir, EngineOptions{});
  Batch b;
  b.ids = read_bin<int32_t>(in + "/ids.bin");
  b.offs = read_bin<int32_t>(in + "/offsets.bin");
  b.mask = read_bin<float>(in + "/mask.bin");
  b.adv = read_bin<float>(in + "/adv.bin");
  if (file_exists(in + "/old.bin")) b.old = read_bin<float>(in + "/old.bin");
  TrainBatch tb = b.view();
  std::vector<float> lp(b.ids.size());
  eng->logprobs(tb, lp.data());
  write_bin(out + "/logprobs.bin", lp);
  TrainHyper hp;
  hp.l_max = double(a.num("l-max", 64));
  const double loss = eng->debug_loss(tb, hp, true);
  std::ostringstream js;
  js << "{\"device\":\"" << eng->device() << "\",\"loss\":" << loss << ",\"params\":[";
  for (size_t i = 0; i < eng->params().size(); i++) {
    const auto& p = eng->params()[i];
    write_bin(out + "/grads/" + p.name + ".bin", eng->get_tensor(p.name, true));
    js << (i ? "," : "") << "\"" << p.name << "\"";
  }
  GenerateOptions go;
  go.max_new_tokens = 8;
  go.temperature = 0;
  auto g = eng->generate(b.ids.data(), std::min<int64_t>(16, int64_t(b.ids.size())), go);
  js << "],\"greedy\":[";
  for (size_t i = 0; i < g.ids.size(); i++) js << (i ? "," : "") << g.ids[i];
  js << "]}\n";
  atomic_write_file(out + "/result.json", js.str());
  std::printf("dumped %s (loss %.9g)\n", out.c_str(), loss);
  return 0;
}

int cmd_bench(const Args& a) {
  const std::string shape_name = a.get("shape", "qwen3-0.6b"), device = a.get("device", "cuda");
  const Shape sh = named_shape(shape_name);
  const std::string dir = a.get("dir", "/tmp/gl-bench-" + shape_name);
  if (!file_exists(dir + "/model.safetensors")) {
    std::printf("writing a random %s checkpoint to %s\n", shape_name.c_str(), dir.c_str());
    write_checkpoint(dir, sh, 1);
  }
  std::vector<int64_t> seqs;
  std::stringstream ss(a.get("seq", "4096"));
  for (std::string x; std::getline(ss, x, ',');) seqs.push_back(std::atoll(x.c_str()));
  auto eng = make(device, dir, EngineOptions{});
  int64_t n_params = 0;
  for (auto& p : eng->params()) n_params += p.numel;
  const double peak_flops = 989e12;  // H100 SXM bf16 dense
  std::ostringstream js;
  js << "{\"shape\":\"" << shape_name << "\",\"device\":\"" << device << "\",\"params\":" << n_params << ",\"runs\":[";
  for (size_t k = 0; k < seqs.size(); k++) {
    const int64_t T = seqs[k];
    Rng r(3);
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (auto& x : ids) x = int32_t(r.next() % uint64_t(sh.vocab));
    std::vector<int32_t> offs = {0, int32_t(T)};
    std::vector<float> mask(size_t(T), 1.0f), adv = {1.0f};
    TrainBatch b;
    b.ids = ids.data(); b.n_tokens = T; b.offsets = offs.data(); b.n_seqs = 1; b.mask = mask.data(); b.advantages = adv.data();
    TrainHyper hp;
    hp.micro_batch_tokens = T;
    if (device == "cuda") cuda_reset_peak_memory();
    eng->train_step(b, hp);  // warm-up (allocations, cuBLAS heuristics)
    const int reps = 2;
    const double t0 = now();
    for (int i = 0; i < reps; i++) eng->train_step(b, hp);
    const double dt = (now() - t0) / reps;
    // MFU: 6·N·T for the matmuls (forward + backward) plus causal attention 6·L·Hq·D·T² (QKᵀ and PV, fwd + bwd, half masked).
    const double flops = 6.0 * double(n_params) * double(T) + 6.0 * double(sh.layers * sh.heads * sh.head_dim) * double(T) * double(T);
    const double tps = double(T) / dt, mfu = flops / dt / peak_flops;
    const double peak_gib = device == "cuda" ? double(cuda_memory_stats().peak) / double(1 << 30) : 0.0;
    std::printf("%s seq %6lld  step %.3f s  %9.0f tok/s  MFU %.1f%%  peak %.1f GiB\n", shape_name.c_str(), (long long)T, dt, tps, 100 * mfu, peak_gib);
    js << (k ? "," : "") << "{\"seq\":" << T << ",\"step_s\":" << dt << ",\"tokens_per_s\":" << tps << ",\"mfu\":" << mfu << ",\"peak_gib\":" << peak_gib << "}";
    std::fflush(stdout);
  }
  js << "]}\n";
  const std::string out = a.get("json", "");
  if (!out.empty()) atomic_write_file(out, js.str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: gpu_driver tiny DIR [...] | compare DIR [...] | reject DIR --lens L | leaks BAD GOOD | shape --shape S --seq T | dump DIR BATCH OUT "
                 "[--device D] | bench --shape S --seq a,b\n");
    return 2;
  }
  const std::string cmd = argv[1];
  try {
    Args a = parse(argc, argv);
    if (cmd == "tiny") {
      Shape s{a.num("vocab", 97), a.num("hidden", 64), a.num("inter", 96), a.num("layers", 2), a.num("heads", 4), a.num("kv", 2),
              a.num("head-dim", 32), a.num("tied", 0) != 0, a.num("bias", 0) != 0, a.num("theta", 10000), a.num("max-pos", 40960),
              a.get("arch", "qwen3")};
      write_checkpoint(a.pos.at(0), s, uint64_t(a.num("seed", 1)));
      return 0;
    }
    if (cmd == "compare") return cmd_compare(a);
    if (cmd == "reject") return cmd_reject(a);
#ifdef GL_CUDA_EMU
    if (cmd == "leaks") return cmd_leaks(a);
#endif
    if (cmd == "shape") return cmd_shape(a);
    if (cmd == "dump") return cmd_dump(a);
    if (cmd == "bench") return cmd_bench(a);
    std::fprintf(stderr, "gpu_driver: unknown command %s\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_driver: %s\n", e.what());
    return 1;
  }
}
