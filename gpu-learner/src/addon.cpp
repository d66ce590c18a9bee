// Node bindings (node-addon-api). Every heavy call runs in an AsyncWorker off the event loop; input
// typed arrays are read in place (kept alive by references), outputs are handed over as external
// ArrayBuffers (no copies). One mutex per model serialises its calls.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "gl/engine.h"
#include "gl/grpo.h"

namespace {

struct Model {
  std::unique_ptr<gl::Engine> engine;
  std::mutex mu;
};
using ModelPtr = std::shared_ptr<Model>;

template <typename T>
struct ArrayArg {
  const T* data = nullptr;
  int64_t length = 0;
  Napi::ObjectReference ref;  // keeps the JS buffer alive while the worker reads it
};

template <typename T>
ArrayArg<T> typed_arg(const Napi::Value& v, napi_typedarray_type type, const char* field, const char* type_name, bool optional = false) {
  ArrayArg<T> a;
  if (optional && (v.IsUndefined() || v.IsNull())) return a;
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type)
    throw Napi::TypeError::New(v.Env(), std::string(field) + " must be a " + type_name);
  auto ta = v.As<Napi::TypedArray>();
  a.data = reinterpret_cast<const T*>(static_cast<const uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset());
  a.length = int64_t(ta.ElementLength());
  a.ref = Napi::Persistent(v.As<Napi::Object>());
  return a;
}

template <typename T, typename Arr>
Napi::Value external_array(Napi::Env env, std::vector<T>&& v) {
  const size_t n = v.size();
  if (n == 0) return Arr::New(env, 0);
  auto* heap = new std::vector<T>(std::move(v));
  auto buf = Napi::ArrayBuffer::New(env, heap->data(), n * sizeof(T), [](Napi::Env, void*, std::vector<T>* h) { delete h; }, heap);
  return Arr::New(env, n, buf, 0);
}

double num_field(const Napi::Object& o, const char* key, bool required, double dflt) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) {
    if (required) throw Napi::TypeError::New(o.Env(), std::string(key) + " is required");
    return dflt;
  }
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string(key) + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

// Runs `exec` on a libuv worker thread under the model lock, then resolves with `done(env)`.
class Job : public Napi::AsyncWorker {
 public:
  Job(Napi::Env env, ModelPtr model, std::function<void(Model&)> exec, std::function<Napi::Value(Napi::Env)> done)
      : Napi::AsyncWorker(env), model_(std::move(model)), exec_(std::move(exec)), done_(std::move(done)), deferred_(env) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      std::lock_guard<std::mutex> g(model_->mu);
      exec_(*model_);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnOK() override {
    Napi::HandleScope scope(Env());
    try {
      deferred_.Resolve(done_(Env()));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  ModelPtr model_;
  std::function<void(Model&)> exec_;
  std::function<Napi::Value(Napi::Env)> done_;
  Napi::Promise::Deferred deferred_;
};

Napi::Value queue_model(Napi::Env env, ModelPtr m, std::function<void(Model&)> exec, std::function<Napi::Value(Napi::Env)> done) {
  auto* job = new Job(env, std::move(m), std::move(exec), std::move(done));
  Napi::Promise p = job->promise();
  job->Queue();
  return p;
}

Napi::Value queue(Napi::Env env, ModelPtr m, std::function<void(gl::Engine&)> exec, std::function<Napi::Value(Napi::Env)> done) {
  return queue_model(
      env, std::move(m),
      [exec = std::move(exec)](Model& md) {
        if (!md.engine) throw std::runtime_error("Learner is closed");
        exec(*md.engine);
      },
      std::move(done));
}

gl::TrainHyper parse_hyper(const Napi::Value& v) {
  if (!v.IsObject()) throw Napi::TypeError::New(v.Env(), "hp must be an object");
  auto o = v.As<Napi::Object>();
  gl::TrainHyper hp;
  hp.lr = num_field(o, "lr", true, 0);
  hp.weight_decay = num_field(o, "weightDecay", true, 0);
  hp.beta1 = num_field(o, "beta1", true, 0);
  hp.beta2 = num_field(o, "beta2", true, 0);
  hp.eps = num_field(o, "eps", true, 0);
  hp.clip_low = num_field(o, "clipLow", true, 0);
  hp.clip_high = num_field(o, "clipHigh", true, 0);
  hp.max_grad_norm = num_field(o, "maxGradNorm", true, 0);
  hp.l_max = num_field(o, "lMax", true, 0);
  const double mbt = num_field(o, "microBatchTokens", false, 4096);
  if (!(mbt >= 1) || mbt != std::floor(mbt) || mbt > 1e12)
    throw Napi::RangeError::New(v.Env(), "microBatchTokens must be an integer >= 1, got " + std::to_string(mbt));
  hp.micro_batch_tokens = int64_t(mbt);
  const double ns = num_field(o, "normSequences", false, 0);
  if (!(ns >= 0) || ns != std::floor(ns) || ns > 1e12)
    throw Napi::RangeError::New(v.Env(), "hp.normSequences must be a non-negative integer, got " + Napi::Number::New(v.Env(), ns).ToString().Utf8Value());
  hp.norm_seqs = int64_t(ns);
  Napi::Value mode = o.Get("mode");
  const std::string ms = mode.IsString() ? mode.As<Napi::String>().Utf8Value() : "";
  if (ms == "grpo++") hp.mode = gl::LossMode::GrpoPlusPlus;
  else if (ms == "grpo") hp.mode = gl::LossMode::Grpo;
  else throw Napi::TypeError::New(v.Env(), "mode must be \"grpo++\" or \"grpo\", got " + (mode.IsString() ? "\"" + ms + "\"" : std::string("a non-string")));
  return hp;
}

// Arguments of trainStep/debugLoss kept alive for the worker.
struct TrainArgs {
  ArrayArg<int32_t> ids, offsets;
  ArrayArg<float> mask, adv, old;
  gl::TrainHyper hp;
  gl::TrainBatch batch() const {
    gl::TrainBatch b;
    b.ids = ids.data; b.n_tokens = ids.length;
    b.offsets = offsets.data; b.n_seqs = offsets.length - 1;
    b.mask = mask.data; b.advantages = adv.data; b.old_logprobs = old.data;
    return b;
  }
};

std::shared_ptr<TrainArgs> parse_train(const Napi::CallbackInfo& info) {
  auto a = std::make_shared<TrainArgs>();
  a->ids = typed_arg<int32_t>(info[0], napi_int32_array, "batch.ids", "Int32Array");
  a->offsets = typed_arg<int32_t>(info[1], napi_int32_array, "batch.offsets", "Int32Array");
  a->mask = typed_arg<float>(info[2], napi_float32_array, "batch.mask", "Float32Array");
  a->adv = typed_arg<float>(info[3], napi_float32_array, "batch.advantages", "Float32Array");
  a->old = typed_arg<float>(info[4], napi_float32_array, "batch.oldLogprobs", "Float32Array", true);
  a->hp = parse_hyper(info[5]);
  auto E = [&](const std::string& m) { return Napi::RangeError::New(info.Env(), m); };
  if (a->offsets.length < 2) throw E("batch.offsets must have n+1 >= 2 entries, got " + std::to_string(a->offsets.length));
  if (a->mask.length != a->ids.length)
    throw E("batch.mask.length=" + std::to_string(a->mask.length) + " must equal batch.ids.length=" + std::to_string(a->ids.length));
  if (a->adv.length != a->offsets.length - 1)
    throw E("batch.advantages.length=" + std::to_string(a->adv.length) + " must equal the number of sequences " + std::to_string(a->offsets.length - 1));
  if (a->old.data && a->old.length != a->ids.length)
    throw E("batch.oldLogprobs.length=" + std::to_string(a->old.length) + " must equal batch.ids.length=" + std::to_string(a->ids.length));
  return a;
}

Napi::Object stats_obj(Napi::Env env, const gl::TrainStats& s) {
  auto o = Napi::Object::New(env);
  o.Set("loss", s.loss);
  o.Set("gradNorm", s.grad_norm);
  o.Set("clipFraction", s.clip_fraction);
  o.Set("rows", double(s.rows));
  o.Set("meanRatio", s.mean_ratio);
  o.Set("tokens", double(s.tokens));
  o.Set("seconds", s.seconds);
  o.Set("skipped", s.skipped);
  o.Set("step", double(s.step));
  return o;
}

// Generate options from JS (index.ts fills the defaults); field names prefixed for error messages.
gl::GenerateOptions parse_generate_options(const Napi::Object& o, const std::string& prefix) {
  Napi::Env env = o.Env();
  gl::GenerateOptions go;
  const double mnt = num_field(o, "maxNewTokens", true, 0);
  if (!(mnt >= 0) || mnt != std::floor(mnt) || mnt > 1e9)
    throw Napi::RangeError::New(env, prefix + "maxNewTokens must be an integer >= 0, got " + std::to_string(mnt));
  go.max_new_tokens = int64_t(mnt);
  go.temperature = num_field(o, "temperature", false, 1.0);
  go.top_p = num_field(o, "topP", false, 1.0);
  const double seed = num_field(o, "seed", true, 0);
  if (!(seed >= 0) || seed != std::floor(seed) || seed > 9007199254740991.0)
    throw Napi::RangeError::New(env, prefix + "seed must be a non-negative safe integer, got " + std::to_string(seed));
  go.seed = uint64_t(seed);
  auto stop = typed_arg<int32_t>(o.Get("stopIds"), napi_int32_array, "stopIds", "Int32Array", true);
  auto allowed = typed_arg<int32_t>(o.Get("allowedIds"), napi_int32_array, "allowedIds", "Int32Array", true);
  go.stop_ids.assign(stop.data, stop.data + stop.length);
  go.allowed_ids.assign(allowed.data, allowed.data + allowed.length);
  const double topk = num_field(o, "topLogprobs", false, 0);
  if (!(topk >= 0) || topk != std::floor(topk) || topk > 1e9)
    throw Napi::RangeError::New(env, prefix + "topLogprobs must be an integer >= 0, got " + std::to_string(topk));
  go.top_logprobs = int64_t(topk);
  return go;
}

class NativeLearner : public Napi::ObjectWrap<NativeLearner> {
 public:
  static Napi::FunctionReference* ctor;
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "NativeLearner",
                       {InstanceMethod("configJson", &NativeLearner::ConfigJson), InstanceMethod("modelJson", &NativeLearner::ModelJson),
                        InstanceMethod("step", &NativeLearner::Step),
                        InstanceMethod("device", &NativeLearner::Device), InstanceMethod("generate", &NativeLearner::Generate),
                        InstanceMethod("logprobs", &NativeLearner::Logprobs), InstanceMethod("trainStep", &NativeLearner::TrainStep),
                        InstanceMethod("debugLoss", &NativeLearner::DebugLoss), InstanceMethod("save", &NativeLearner::Save),
                        InstanceMethod("reload", &NativeLearner::Reload), InstanceMethod("paramInfo", &NativeLearner::ParamInfo),
                        InstanceMethod("getTensor", &NativeLearner::GetTensor), InstanceMethod("setTensor", &NativeLearner::SetTensor),
                        InstanceMethod("close", &NativeLearner::Close),
                        InstanceMethod("decodeAdd", &NativeLearner::DecodeAdd), InstanceMethod("decodeStep", &NativeLearner::DecodeStep),
                        InstanceMethod("decodeRemove", &NativeLearner::DecodeRemove)});
  }
  NativeLearner(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeLearner>(info) {}
  ModelPtr model;

 private:
  ModelPtr live(Napi::Env env) {
    if (!model || !model->engine) throw Napi::Error::New(env, "Learner is closed");
    return model;
  }
  Napi::Value ConfigJson(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    return Napi::String::New(info.Env(), m->engine->config().raw_json);
  }
  Napi::Value ModelJson(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    return Napi::String::New(info.Env(), resolved_config_json(m->engine->config()));
  }
  Napi::Value Step(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    std::lock_guard<std::mutex> g(m->mu);
    return Napi::Number::New(info.Env(), double(m->engine->step()));
  }
  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), live(info.Env())->engine->device()); }

  // generate(prompt Int32Array, opts {maxNewTokens, temperature, topP, seed, stopIds: Int32Array, allowedIds: Int32Array, topLogprobs})
  Napi::Value Generate(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto prompt = std::make_shared<ArrayArg<int32_t>>(typed_arg<int32_t>(info[0], napi_int32_array, "promptIds", "Int32Array"));
    if (!info[1].IsObject()) throw Napi::TypeError::New(info.Env(), "generate options must be an object");
    const gl::GenerateOptions go = parse_generate_options(info[1].As<Napi::Object>(), "");
    auto res = std::make_shared<gl::GenerateResult>();
    return queue(
        info.Env(), m, [prompt, go, res](gl::Engine& e) { *res = e.generate(prompt->data, prompt->length, go); },
        [res](Napi::Env env) -> Napi::Value {
          auto out = Napi::Object::New(env);
          const bool stopped = res->stopped;
          out.Set("ids", external_array<int32_t, Napi::Int32Array>(env, std::move(res->ids)));
          out.Set("logprobs", external_array<float, Napi::Float32Array>(env, std::move(res->logprobs)));
          out.Set("finishReason", stopped ? "stop" : "length");
          if (!res->top_ids.empty()) {
            out.Set("topIds", external_array<int32_t, Napi::Int32Array>(env, std::move(res->top_ids)));
            out.Set("topLogprobs", external_array<float, Napi::Float32Array>(env, std::move(res->top_logprobs)));
          }
          return out;
        });
  }

  // decodeAdd(prompt Int32Array, samples: options[]) -> Promise<number[]>: the samples' sequence ids
  Napi::Value DecodeAdd(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto prompt = std::make_shared<ArrayArg<int32_t>>(typed_arg<int32_t>(info[0], napi_int32_array, "promptIds", "Int32Array"));
    if (!info[1].IsArray()) throw Napi::TypeError::New(info.Env(), "samples must be an array of generate options");
    auto arr = info[1].As<Napi::Array>();
    auto opts = std::make_shared<std::vector<gl::GenerateOptions>>();
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Value v = arr.Get(i);
      const std::string prefix = "samples[" + std::to_string(i) + "].";
      if (!v.IsObject()) throw Napi::TypeError::New(info.Env(), "samples[" + std::to_string(i) + "] must be an object");
      opts->push_back(parse_generate_options(v.As<Napi::Object>(), prefix));
    }
    auto ids = std::make_shared<std::vector<int64_t>>();
    return queue(
        info.Env(), m, [prompt, opts, ids](gl::Engine& e) { *ids = e.decode_add(prompt->data, prompt->length, *opts); },
        [ids](Napi::Env env) -> Napi::Value {
          auto out = Napi::Array::New(env, ids->size());
          for (size_t i = 0; i < ids->size(); i++) out.Set(uint32_t(i), double((*ids)[i]));
          return out;
        });
  }

  // decodeStep() -> Promise<{seq, id, logprob, topIds?, topLogprobs?, finishReason?}[]>: one token per running sequence
  Napi::Value DecodeStep(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto toks = std::make_shared<std::vector<gl::DecodeToken>>();
    return queue(
        info.Env(), m, [toks](gl::Engine& e) { *toks = e.decode_step(); },
        [toks](Napi::Env env) -> Napi::Value {
          auto out = Napi::Array::New(env, toks->size());
          for (size_t i = 0; i < toks->size(); i++) {
            gl::DecodeToken& t = (*toks)[i];
            auto o = Napi::Object::New(env);
            o.Set("seq", double(t.seq));
            o.Set("id", double(t.id));
            o.Set("logprob", double(t.logprob));
            if (!t.top_ids.empty()) {
              o.Set("topIds", external_array<int32_t, Napi::Int32Array>(env, std::move(t.top_ids)));
              o.Set("topLogprobs", external_array<float, Napi::Float32Array>(env, std::move(t.top_logprobs)));
            }
            if (t.finish != gl::DecodeToken::Running) o.Set("finishReason", t.finish == gl::DecodeToken::Stop ? "stop" : "length");
            out.Set(uint32_t(i), o);
          }
          return out;
        });
  }

  // decodeRemove(seq) -> Promise<boolean>: ends a running sequence (false: no such sequence)
  Napi::Value DecodeRemove(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "seq must be a number");
    const int64_t seq = int64_t(info[0].As<Napi::Number>().DoubleValue());
    auto found = std::make_shared<bool>(false);
    return queue(
        info.Env(), m, [seq, found](gl::Engine& e) { *found = e.decode_remove(seq); },
        [found](Napi::Env env) -> Napi::Value { return Napi::Boolean::New(env, *found); });
  }

  Napi::Value Logprobs(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto ids = std::make_shared<ArrayArg<int32_t>>(typed_arg<int32_t>(info[0], napi_int32_array, "batch.ids", "Int32Array"));
    auto offs = std::make_shared<ArrayArg<int32_t>>(typed_arg<int32_t>(info[1], napi_int32_array, "batch.offsets", "Int32Array"));
    if (offs->length < 2) throw Napi::RangeError::New(info.Env(), "batch.offsets must have n+1 >= 2 entries, got " + std::to_string(offs->length));
    auto out = std::make_shared<std::vector<float>>();
    return queue(
        info.Env(), m,
        [ids, offs, out](gl::Engine& e) {
          gl::PackedBatch b;
          b.ids = ids->data; b.n_tokens = ids->length; b.offsets = offs->data; b.n_seqs = offs->length - 1;
          out->assign(size_t(ids->length), 0.0f);
          e.logprobs(b, out->data());
        },
        [out](Napi::Env env) { return external_array<float, Napi::Float32Array>(env, std::move(*out)); });
  }

  Napi::Value TrainStep(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto a = parse_train(info);
    auto st = std::make_shared<gl::TrainStats>();
    // each trained token's log-prob before the step, NaN elsewhere (stats.logprobs)
    auto lp = std::make_shared<std::vector<float>>(size_t(a->ids.length), std::numeric_limits<float>::quiet_NaN());
    return queue(
        info.Env(), m,
        [a, st, lp](gl::Engine& e) {
          gl::TrainBatch b = a->batch();
          b.logprobs_out = lp->data();
          *st = e.train_step(b, a->hp);
        },
        [st, lp](Napi::Env env) -> Napi::Value {
          Napi::Object o = stats_obj(env, *st);
          auto out = Napi::Float32Array::New(env, lp->size());
          std::copy(lp->begin(), lp->end(), out.Data());
          o.Set("logprobs", out);
          return o;
        });
  }

  // debugLoss(ids, offsets, mask, adv, old, hp, withGrads) -> loss; gradients stay readable via getTensor(name, true)
  Napi::Value DebugLoss(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto a = parse_train(info);
    const bool with_grads = info[6].ToBoolean();
    auto loss = std::make_shared<double>(0);
    return queue(
        info.Env(), m, [a, loss, with_grads](gl::Engine& e) { *loss = e.debug_loss(a->batch(), a->hp, with_grads); },
        [loss](Napi::Env env) -> Napi::Value { return Napi::Number::New(env, *loss); });
  }

  Napi::Value Save(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    if (!info[0].IsString()) throw Napi::TypeError::New(info.Env(), "dir must be a string");
    std::string dir = info[0].As<Napi::String>();
    return queue(info.Env(), m, [dir](gl::Engine& e) { e.save(dir); }, [](Napi::Env env) { return env.Undefined(); });
  }

  Napi::Value Reload(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    if (!info[0].IsString()) throw Napi::TypeError::New(info.Env(), "dir must be a string");
    std::string dir = info[0].As<Napi::String>();
    return queue(info.Env(), m, [dir](gl::Engine& e) { e.load(dir); }, [](Napi::Env env) { return env.Undefined(); });
  }

  Napi::Value ParamInfo(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    auto arr = Napi::Array::New(info.Env());
    uint32_t i = 0;
    for (auto& p : m->engine->params()) {
      auto o = Napi::Object::New(info.Env());
      o.Set("name", p.name);
      auto shape = Napi::Array::New(info.Env());
      for (size_t k = 0; k < p.shape.size(); k++) shape.Set(uint32_t(k), double(p.shape[k]));
      o.Set("shape", shape);
      arr.Set(i++, o);
    }
    return arr;
  }

  Napi::Value GetTensor(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    if (!info[0].IsString()) throw Napi::TypeError::New(info.Env(), "name must be a string");
    std::vector<float> v;
    try {
      std::lock_guard<std::mutex> g(m->mu);
      v = m->engine->get_tensor(info[0].As<Napi::String>(), info[1].ToBoolean());
    } catch (const std::exception& e) {
      throw Napi::Error::New(info.Env(), e.what());
    }
    return external_array<float, Napi::Float32Array>(info.Env(), std::move(v));
  }

  Napi::Value SetTensor(const Napi::CallbackInfo& info) {
    auto m = live(info.Env());
    if (!info[0].IsString()) throw Napi::TypeError::New(info.Env(), "name must be a string");
    auto data = typed_arg<float>(info[1], napi_float32_array, "data", "Float32Array");
    try {
      std::lock_guard<std::mutex> g(m->mu);
      m->engine->set_tensor(info[0].As<Napi::String>(), data.data, data.length);
    } catch (const std::exception& e) {
      throw Napi::Error::New(info.Env(), e.what());
    }
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (model) {
      std::lock_guard<std::mutex> g(model->mu);  // waits for an in-flight call on this model
      model->engine.reset();
    }
    return info.Env().Undefined();
  }
};
Napi::FunctionReference* NativeLearner::ctor = nullptr;

// load(dir, device, threads, naiveMatmul[, minSharedPrefix[, promptCacheBytes[, emulateHalf]]]) -> Promise<NativeLearner>
Napi::Value Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "dir must be a string");
  if (!info[1].IsString()) throw Napi::TypeError::New(env, "device must be a string");
  std::string dir = info[0].As<Napi::String>(), device = info[1].As<Napi::String>();
  gl::EngineOptions opts;
  const double th = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0;
  if (!(th >= 0) || th != std::floor(th) || th > 4096) throw Napi::RangeError::New(env, "threads must be an integer in [0, 4096], got " + std::to_string(th));
  opts.threads = int(th);
  opts.naive_matmul = info[3].ToBoolean();
  if (info.Length() > 4 && !info[4].IsUndefined()) {
    const double ms = info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : -1;
    if (!(ms >= 0) || ms != std::floor(ms)) throw Napi::RangeError::New(env, "minSharedPrefix must be a non-negative integer, got " + info[4].ToString().Utf8Value());
    opts.min_shared_prefix = int64_t(ms);
  }
  if (info.Length() > 5 && !info[5].IsUndefined()) {
    const double pc = info[5].IsNumber() ? info[5].As<Napi::Number>().DoubleValue() : -1;
    if (!(pc >= 0) || pc != std::floor(pc)) throw Napi::RangeError::New(env, "promptCacheBytes must be a non-negative integer, got " + info[5].ToString().Utf8Value());
    opts.prompt_cache_bytes = int64_t(pc);
  }
  if (info.Length() > 6 && !info[6].IsUndefined()) {
    const std::string h = info[6].IsString() ? info[6].As<Napi::String>().Utf8Value() : info[6].ToString().Utf8Value();
    if (h == "bf16") opts.emulate_half = gl::EngineOptions::Half::bf16;
    else if (h == "fp16") opts.emulate_half = gl::EngineOptions::Half::fp16;
    else throw Napi::RangeError::New(env, "emulateHalf must be \"bf16\" or \"fp16\", got " + h);
  }
  auto m = std::make_shared<Model>();
  return queue_model(
      env, m, [dir, device, opts](Model& md) { md.engine = gl::make_engine(device, dir, opts); },
      [m](Napi::Env env) -> Napi::Value {
        Napi::Object obj = NativeLearner::ctor->New({});
        NativeLearner::Unwrap(obj)->model = m;
        return obj;
      });
}

Napi::Value GrpoTokenLoss(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  double a[5];
  const char* names[5] = {"logp", "oldLogp", "advantage", "clipLow", "clipHigh"};
  for (int i = 0; i < 5; i++) {
    if (!info[i].IsNumber()) throw Napi::TypeError::New(env, std::string(names[i]) + " must be a number");
    a[i] = info[i].As<Napi::Number>().DoubleValue();
  }
  const gl::TokenLoss t = gl::grpo_token_loss(a[0], a[1], a[2], a[3], a[4]);
  auto o = Napi::Object::New(env);
  o.Set("loss", t.loss);
  o.Set("dlogp", t.dlogp);
  o.Set("ratio", t.ratio);
  o.Set("clipped", t.clipped);
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  NativeLearner::ctor = new Napi::FunctionReference(Napi::Persistent(NativeLearner::Init(env)));
  exports.Set("load", Napi::Function::New(env, Load));
  exports.Set("grpoTokenLoss", Napi::Function::New(env, GrpoTokenLoss));
  exports.Set("gemmKernels", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                return Napi::String::New(info.Env(), gl::cpu_gemm_kernels());
              }));
#ifdef GL_HAVE_CUDA
  exports.Set("cudaBuilt", true);
#else
  exports.Set("cudaBuilt", false);
#endif
  return exports;
}

}  // namespace

NODE_API_MODULE(gpu_learner, Init)
