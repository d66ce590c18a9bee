// Standalone driver (no Node): gl_driver forward|gradcheck|bench DIR [--device cpu|cuda] [--threads N]
// For checking a backend on a machine without Node (e.g. the CUDA one against the CPU reference).
#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gl/engine.h"
#include "gl/sampling.h"

using namespace gl;

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(r.next() % uint64_t(vocab));
  return v;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gl_driver forward|gradcheck|bench DIR [--device cpu|cuda] [--threads N] [--seq N]\n");
    return 2;
  }
  const std::string cmd = argv[1], dir = argv[2];
  std::string device = "cpu";
  EngineOptions opts;
  int64_t seq = 512;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads")) opts.threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seq")) seq = std::atoll(argv[i + 1]);
  }
  try {
    auto eng = make_engine(device, dir, opts);
    const int64_t V = eng->config().vocab_size;
    if (cmd == "forward") {
      auto ids = random_ids(16, V, 1);
      int32_t offs[2] = {0, 16};
      std::vector<float> lp(16);
      eng->logprobs({ids.data(), 16, offs, 1}, lp.data());
      for (int i = 0; i < 16; i++) std::printf("%d %d %.7f\n", i, ids[size_t(i)], double(lp[size_t(i)]));
    } else if (cmd == "gradcheck") {
      // Directional central differences per tensor: (L(θ+εu) − L(θ−εu)) / 2ε vs ∇L·u.
      const int64_t n = 24;
      auto ids = random_ids(n, V, 2);
      int32_t offs[3] = {0, 10, int32_t(n)};
      std::vector<float> mask(size_t(n), 1.0f), adv = {1.0f, -0.7f}, old(static_cast<size_t>(n));
      eng->logprobs({ids.data(), n, offs, 2}, old.data());
      for (int64_t t = 0; t < n; t++) old[size_t(t)] = std::min(0.0f, old[size_t(t)] - ((t % 3 == 0) ? 0.5f : (t % 3 == 1 ? -0.5f : 0.0f)));
      TrainBatch b;
      b.ids = ids.data(); b.n_tokens = n; b.offsets = offs; b.n_seqs = 2; b.mask = mask.data(); b.advantages = adv.data(); b.old_logprobs = old.data();
      TrainHyper hp;
      hp.l_max = 8;
      eng->debug_loss(b, hp, true);
      double worst = 0;
      for (auto& p : eng->params()) {
        auto g = eng->get_tensor(p.name, true), w = eng->get_tensor(p.name, false);
        Rng r(7);
        std::vector<float> u(g.size()), wp(g.size());
        double gu = 0;
        for (size_t i = 0; i < u.size(); i++) { u[i] = float(r.uniform() * 2 - 1); gu += double(g[i]) * u[i]; }
        const double eps = 1e-3;
        for (size_t i = 0; i < u.size(); i++) wp[i] = w[i] + float(eps) * u[i];
        eng->set_tensor(p.name, wp.data(), p.numel);
        const double lp = eng->debug_loss(b, hp, false);
        for (size_t i = 0; i < u.size(); i++) wp[i] = w[i] - float(eps) * u[i];
        eng->set_tensor(p.name, wp.data(), p.numel);
        const double lm = eng->debug_loss(b, hp, false);
        eng->set_tensor(p.name, w.data(), p.numel);
        const double fd = (lp - lm) / (2 * eps), rel = std::fabs(fd - gu) / std::max(1e-6, std::max(std::fabs(fd), std::fabs(gu)));
        worst = std::max(worst, rel);
        std::printf("%-50s analytic % .6e  numeric % .6e  rel %.2e\n", p.name.c_str(), gu, fd, rel);
      }
      std::printf("worst relative error %.2e\n", worst);
    } else if (cmd == "bench") {
      auto ids = random_ids(seq, V, 3);
      int32_t offs[2] = {0, int32_t(seq)};
      std::vector<float> lp(static_cast<size_t>(seq)), mask(size_t(seq), 1.0f), adv = {1.0f};
      double t0 = now();
      eng->logprobs({ids.data(), seq, offs, 1}, lp.data());
      double t1 = now();
      TrainBatch b;
      b.ids = ids.data(); b.n_tokens = seq; b.offsets = offs; b.n_seqs = 1; b.mask = mask.data(); b.advantages = adv.data();
      eng->train_step(b, TrainHyper{});
      double t2 = now();
      GenerateOptions go;
      go.max_new_tokens = 64;
      go.seed = 1;
      auto r = eng->generate(ids.data(), 16, go);
      double t3 = now();
      std::printf("forward  %.0f tok/s\ntrain    %.0f tok/s\ngenerate %.0f tok/s\n", seq / (t1 - t0), seq / (t2 - t1), r.ids.size() / (t3 - t2));
    } else {
      std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gl_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
