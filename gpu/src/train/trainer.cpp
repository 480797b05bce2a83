#include "gpu/train/trainer.h"

#include "core/model/safetensors.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "gpu/model/model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>
#include <numbers>
#include <thread>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
namespace fs = std::filesystem;

namespace {

uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// All documents concatenated, with the start offset of each, so a row is a slice of the stream.
struct Stream
{
    std::vector<int64_t> tokens;
    std::vector<int64_t> starts; // document start offsets usable as row starts
};

Stream buildStream(const std::vector<std::vector<int>> &docs, int vocab, const char *which)
{
    Stream s;
    for (size_t d = 0; d < docs.size(); ++d) {
        s.starts.push_back(int64_t(s.tokens.size()));
        for (int id : docs[d]) {
            if (id < 0 || id >= vocab)
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("{} document {}: token id {} outside the vocabulary [0, {})", which,
                                        d, id, vocab));
            s.tokens.push_back(id);
        }
    }
    return s;
}

// Row r: seqLen + 1 tokens starting at a document start, wrapping around the stream's end.
void fillRow(const Stream &s, int64_t start, int seqLen, int64_t *out)
{
    const int64_t n = int64_t(s.tokens.size());
    for (int i = 0; i <= seqLen; ++i)
        out[i] = s.tokens[size_t((start + i) % n)];
}

// [rows, seqLen + 1] int64
torch::Tensor trainBatch(const Stream &s, const TrainOptions &o, int step)
{
    auto batch = torch::empty({o.batchSize, o.seqLen + 1}, torch::kInt64);
    auto *p = batch.data_ptr<int64_t>();
    for (int r = 0; r < o.batchSize; ++r) {
        const uint64_t h = splitmix(o.seed * 0x100000001b3ULL + uint64_t(step) * 1000003ULL + uint64_t(r));
        fillRow(s, s.starts[size_t(h % s.starts.size())], o.seqLen, p + size_t(r) * size_t(o.seqLen + 1));
    }
    return batch;
}

// Fixed validation rows: evenly spaced document starts.
torch::Tensor validationRows(const Stream &s, const TrainOptions &o)
{
    const int rows = int(std::min<size_t>(size_t(o.evalRows), s.starts.size()));
    auto batch = torch::empty({rows, o.seqLen + 1}, torch::kInt64);
    auto *p = batch.data_ptr<int64_t>();
    for (int r = 0; r < rows; ++r)
        fillRow(s, s.starts[size_t(r) * s.starts.size() / size_t(rows)], o.seqLen,
                p + size_t(r) * size_t(o.seqLen + 1));
    return batch;
}

struct Params
{
    std::vector<std::string> names;
    std::vector<torch::Tensor> tensors;
    std::map<std::string, torch::Tensor> byName;

    torch::Tensor add(const std::string &name, torch::Tensor t)
    {
        t.set_requires_grad(true);
        names.push_back(name);
        tensors.push_back(t);
        byName[name] = t;
        return t;
    }
    const torch::Tensor &operator[](const std::string &n) const { return byName.at(n); }
};

Params initParams(const core::ModelConfig &c, uint64_t seed)
{
    torch::manual_seed(seed);
    Params p;
    const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                  kv = int64_t(c.numKvHeads) * c.headDim, inter = c.intermediateSize;
    const double std = 0.02, outStd = 0.02 / std::sqrt(2.0 * c.numLayers); // GPT-2 style residual scaling
    p.add("model.embed_tokens.weight", torch::randn({c.vocabSize, h}) * std);
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string n = fmt::format("model.layers.{}.", l);
        p.add(n + "input_layernorm.weight", torch::ones({h}));
        p.add(n + "self_attn.q_proj.weight", torch::randn({q, h}) * std);
        p.add(n + "self_attn.k_proj.weight", torch::randn({kv, h}) * std);
        p.add(n + "self_attn.v_proj.weight", torch::randn({kv, h}) * std);
        p.add(n + "self_attn.o_proj.weight", torch::randn({h, q}) * outStd);
        if (c.qkvBias) {
            p.add(n + "self_attn.q_proj.bias", torch::zeros({q}));
            p.add(n + "self_attn.k_proj.bias", torch::zeros({kv}));
            p.add(n + "self_attn.v_proj.bias", torch::zeros({kv}));
        }
        p.add(n + "post_attention_layernorm.weight", torch::ones({h}));
        p.add(n + "mlp.gate_proj.weight", torch::randn({inter, h}) * std);
        p.add(n + "mlp.up_proj.weight", torch::randn({inter, h}) * std);
        p.add(n + "mlp.down_proj.weight", torch::randn({h, inter}) * outStd);
    }
    p.add("model.norm.weight", torch::ones({h}));
    if (!c.tieWordEmbeddings)
        p.add("lm_head.weight", torch::randn({c.vocabSize, h}) * std);
    return p;
}

torch::Tensor rmsNorm(const torch::Tensor &x, const torch::Tensor &w, double eps)
{
    return w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + eps));
}

// Logits [B, T, vocab] for tokens [B, T]; the same function the engine computes (rotate-half RoPE).
// cos / sin: per layer [layers] x [T, half], each layer's RoPE (ModelConfig::ropeInvFreq(layer)).
torch::Tensor forward(const Params &p, const core::ModelConfig &c, const std::vector<torch::Tensor> &cos,
                      const std::vector<torch::Tensor> &sin, const torch::Tensor &tokens)
{
    const int64_t B = tokens.size(0), T = tokens.size(1);
    const int64_t nh = c.numHeads, nkv = c.numKvHeads, hd = c.headDim, half = hd / 2;
    auto rope = [&](const torch::Tensor &x, int l) { // x [B, heads, T, hd]; cos/sin [T, half]
        const auto &co = cos[size_t(l)], &si = sin[size_t(l)];
        auto x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
        return torch::cat({x1 * co - x2 * si, x2 * co + x1 * si}, 3);
    };
    auto lin = [&](const torch::Tensor &x, const std::string &w, const std::string &b) {
        return c.qkvBias && !b.empty() ? torch::linear(x, p[w], p[b]) : torch::linear(x, p[w]);
    };
    auto mask = torch::ones({T, T}, torch::kBool).triu(1);
    auto x = p["model.embed_tokens.weight"].index_select(0, tokens.reshape({-1})).view({B, T, c.hiddenSize});
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string n = fmt::format("model.layers.{}.", l);
        auto h = rmsNorm(x, p[n + "input_layernorm.weight"], c.rmsNormEps);
        auto q = lin(h, n + "self_attn.q_proj.weight", n + "self_attn.q_proj.bias")
                     .view({B, T, nh, hd})
                     .transpose(1, 2);
        auto k = lin(h, n + "self_attn.k_proj.weight", n + "self_attn.k_proj.bias")
                     .view({B, T, nkv, hd})
                     .transpose(1, 2);
        auto v = lin(h, n + "self_attn.v_proj.weight", n + "self_attn.v_proj.bias")
                     .view({B, T, nkv, hd})
                     .transpose(1, 2);
        q = rope(q, l);
        k = rope(k, l);
        if (nkv != nh) { // GQA: query head h uses kv head h / (nh / nkv)
            k = k.repeat_interleave(nh / nkv, 1);
            v = v.repeat_interleave(nh / nkv, 1);
        }
        auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(double(hd));
        scores = scores.masked_fill(mask, -INFINITY);
        auto att = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({B, T, nh * hd});
        x = x + torch::linear(att, p[n + "self_attn.o_proj.weight"]);
        auto h2 = rmsNorm(x, p[n + "post_attention_layernorm.weight"], c.rmsNormEps);
        x = x + torch::linear(torch::silu(torch::linear(h2, p[n + "mlp.gate_proj.weight"])) *
                                  torch::linear(h2, p[n + "mlp.up_proj.weight"]),
                              p[n + "mlp.down_proj.weight"]);
    }
    x = rmsNorm(x, p["model.norm.weight"], c.rmsNormEps);
    return torch::linear(x, c.tieWordEmbeddings ? p["model.embed_tokens.weight"] : p["lm_head.weight"]);
}

torch::Tensor lossOf(const torch::Tensor &logits, const torch::Tensor &targets)
{
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

double lrAt(const TrainOptions &o, int step) // step counts from 0
{
    if (step < o.warmupSteps)
        return o.lr * double(step + 1) / double(o.warmupSteps);
    const double progress = double(step - o.warmupSteps) / double(std::max(1, o.steps - o.warmupSteps));
    return o.minLr + 0.5 * (o.lr - o.minLr) * (1.0 + std::cos(std::numbers::pi * std::min(1.0, progress)));
}

core::DType checkWeightDtype(const std::string &name)
{
    std::string upper = name;
    for (char &ch : upper)
        ch = char(std::toupper(static_cast<unsigned char>(ch)));
    const auto dtype = core::parseDType(upper);
    if (!dtype || (*dtype != core::DType::F32 && *dtype != core::DType::BF16 && *dtype != core::DType::F16))
        throw Error(ErrorCode::InvalidArgument, "weight dtype must be F32, BF16 or F16, got '" + name + "'");
    return *dtype;
}

void writeModel(const Params &p, const core::ModelConfig &c, const TrainOptions &o, const fs::path &dir)
{
    const auto dtype = std::optional<core::DType>(checkWeightDtype(o.weightDtype));
    core::SafetensorsWriter w;
    w.setMetadata("format", "pt");
    const auto st = *dtype == core::DType::F32    ? torch::kFloat32
                    : *dtype == core::DType::BF16 ? torch::kBFloat16
                                                  : torch::kFloat16;
    for (size_t i = 0; i < p.names.size(); ++i) {
        auto t = p.tensors[i].detach().to(st).contiguous();
        std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
        w.add(p.names[i], *dtype, shape,
              std::span<const std::byte>(static_cast<const std::byte *>(t.data_ptr()), size_t(t.nbytes())));
    }
    w.write(dir / "model.safetensors");
    core::ModelConfig out = c;
    out.torchDtype = *dtype == core::DType::F32    ? "float32"
                     : *dtype == core::DType::BF16 ? "bfloat16"
                                                   : "float16";
    core::writeFileAtomic(dir / "config.json", out.toHfJson());
}

// Refuses architectures and settings the trainer does not implement, and empty data.
void checkTrainable(const TrainOptions &o, const TrainData &data)
{
    const core::ModelConfig &c = o.model;
    c.validate("training configuration");
    if (c.oBias || c.mlpBias)
        throw Error(ErrorCode::Unsupported,
                    "the trainer implements q/k/v biases only (Qwen2 style), not o_proj or MLP biases");
    if (c.unitOffsetNorm || c.sandwichNorms || c.scaleEmbeddings || !c.layerAttention.empty())
        throw Error(ErrorCode::Unsupported,
                    fmt::format("the trainer implements the Llama architecture; model_type '{}' (Gemma's "
                                "norms, GeGLU and sliding-window layers) is not supported for training",
                                c.modelType));
    if (c.qkNorm || c.fusedProjections)
        throw Error(ErrorCode::Unsupported,
                    fmt::format("the trainer implements the Llama architecture; model_type '{}' ({}) is not "
                                "supported for training",
                                c.modelType,
                                c.qkNorm ? "per-head q/k norms" : "fused qkv and gate/up projections"));
    checkWeightDtype(o.weightDtype);
    if (c.ropeLayout != core::RopeLayout::RotateHalf)
        throw Error(ErrorCode::InvalidArgument, "the trainer writes HF layout: RoPE must be rotate-half");
    if (data.train.empty() || data.validation.empty())
        throw Error(ErrorCode::InvalidArgument,
                    "training needs at least one training and one validation document");
    if (o.steps <= 0 || o.batchSize <= 0 || o.seqLen <= 1)
        throw Error(ErrorCode::InvalidArgument, "steps, batch size and sequence length must be positive");
}

// Fine-tuning: every parameter from the given model, checked by name and shape.
void loadInitialWeights(Params &p, const fs::path &initFrom)
{
    const auto ws = core::WeightSet::open(initFrom);
    for (size_t i = 0; i < p.names.size(); ++i) {
        const auto t = ws.get(p.names[i]);
        std::vector<int64_t> want(p.tensors[i].sizes().begin(), p.tensors[i].sizes().end());
        if (t.info->shape != want)
            throw Error(ErrorCode::Shape,
                        fmt::format("{}: tensor {} has shape [{}], the architecture trains [{}]",
                                    ws.source().string(), p.names[i], fmt::join(t.info->shape, ", "),
                                    fmt::join(want, ", ")));
        const std::vector<float> v = core::toFloatVector(t);
        p.tensors[i].copy_(
            torch::from_blob(const_cast<float *>(v.data()), p.tensors[i].sizes(), torch::kFloat32));
    }
}

// AdamW's two parameter groups: weight decay on matrices only, as is usual for transformers.
std::vector<torch::optim::OptimizerParamGroup> paramGroups(const Params &p, const TrainOptions &o)
{
    std::vector<torch::Tensor> decay, noDecay;
    for (size_t i = 0; i < p.names.size(); ++i)
        (p.tensors[i].dim() >= 2 ? decay : noDecay).push_back(p.tensors[i]);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        decay, std::make_unique<torch::optim::AdamWOptions>(
                   torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weightDecay)));
    groups.emplace_back(noDecay,
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(0.0)));
    return groups;
}

// Everything that decides which batches and updates a step makes: a resume with other settings
// or other data would silently mix two runs, so it is refused, naming the setting.
nlohmann::json runSettings(const TrainOptions &o, const Stream &train, const Stream &val)
{
    const core::ModelConfig &c = o.model;
    size_t trainTokens = train.tokens.size(), valTokens = val.tokens.size();
    nlohmann::json settings = {{"seed", o.seed},
                               {"seq_len", o.seqLen},
                               {"batch_size", o.batchSize},
                               {"steps", o.steps},
                               {"lr", o.lr},
                               {"min_lr", o.minLr},
                               {"warmup_steps", o.warmupSteps},
                               {"weight_decay", o.weightDecay},
                               {"beta1", o.beta1},
                               {"beta2", o.beta2},
                               {"grad_clip", o.gradClip},
                               {"architecture", c.toHfJson()},
                               {"train_tokens", trainTokens},
                               {"validation_tokens", valTokens}};
    if (!o.shard.empty()) // only then, so states saved before shards existed still resume
        settings["shard"] = o.shard;
    if (!o.initFrom.empty())
        settings["init"] = o.initFrom.string();
    return settings;
}

// Training losses since the last evaluation (saved with the state).
struct LossWindow
{
    double loss = 0;
    int steps = 0;
};

// Resumes from stateDir/state.json (which must exist): refuses changed settings, then restores the
// parameters, the optimizer, the loss window and the evaluations so far. Returns the next step.
int restoreState(const fs::path &stateDir, const nlohmann::json &settings, Params &p,
                 torch::optim::AdamW &opt, LossWindow &window, TrainResult &result)
{
    try {
        const auto st = nlohmann::json::parse(std::ifstream(stateDir / "state.json"));
        const auto &savedSettings = st.at("settings");
        for (const auto &[key, value] : settings.items()) {
            if (!savedSettings.contains(key) || savedSettings.at(key) != value)
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("{}: cannot resume: '{}' was {} and is now {} (start a new run or "
                                        "use the original settings and data)",
                                        (stateDir / "state.json").string(), key,
                                        savedSettings.contains(key) ? savedSettings.at(key).dump() : "absent",
                                        value.dump()));
        }
        const int startStep = st.at("step").get<int>();
        window.loss = st.at("window_loss").get<double>();
        window.steps = st.at("window_steps").get<int>();
        const fs::path checkpoint = stateDir / st.at("checkpoint").get<std::string>();
        std::vector<torch::Tensor> saved;
        torch::load(saved, (checkpoint / "params.pt").string());
        if (saved.size() != p.tensors.size())
            throw Error(ErrorCode::Format,
                        (checkpoint / "params.pt").string() + ": parameter count differs from the model");
        for (size_t i = 0; i < saved.size(); ++i) {
            if (!saved[i].sizes().equals(p.tensors[i].sizes()))
                throw Error(ErrorCode::Shape,
                            fmt::format("{}: parameter '{}' has another shape than the model",
                                        (checkpoint / "params.pt").string(), p.names[i]));
            p.tensors[i].copy_(saved[i]);
        }
        torch::load(opt, (checkpoint / "optimizer.pt").string());
        for (const auto &e : st.at("evaluations")) {
            TrainProgress tp;
            tp.step = e.at("step");
            tp.loss = e.at("loss");
            tp.valLoss = e.at("val_loss").get<double>();
            result.evaluations.push_back(tp);
        }
        return startStep;
    } catch (const nlohmann::json::exception &e) {
        throw Error(ErrorCode::Format, (stateDir / "state.json").string() + ": " + e.what());
    } catch (const c10::Error &e) {
        throw Error(ErrorCode::Format,
                    stateDir.string() + ": cannot read training state: " + e.what_without_backtrace());
    }
}

// Each save goes to its own train_state/step-N/ directory; state.json, written atomically last,
// names the directory. A crash at any point leaves state.json naming a complete checkpoint.
void saveState(const fs::path &stateDir, int step, const Params &p, torch::optim::AdamW &opt,
               const nlohmann::json &settings, const LossWindow &window,
               const std::vector<TrainProgress> &evaluations)
{
    const std::string name = fmt::format("step-{:07d}", step);
    const fs::path dir = stateDir / name;
    try {
        std::vector<torch::Tensor> detached;
        for (const auto &t : p.tensors)
            detached.push_back(t.detach());
        fs::create_directories(dir);
        torch::save(detached, (dir / "params.pt").string());
        torch::save(opt, (dir / "optimizer.pt").string());
    } catch (const c10::Error &e) {
        throw Error(ErrorCode::Io,
                    dir.string() + ": cannot save training state: " + e.what_without_backtrace());
    } catch (const fs::filesystem_error &e) {
        throw Error(ErrorCode::Io, dir.string() + ": cannot save training state: " + e.code().message());
    }
    nlohmann::json evals = nlohmann::json::array();
    for (const auto &e : evaluations)
        evals.push_back({{"step", e.step}, {"loss", e.loss}, {"val_loss", e.valLoss.value_or(0.0)}});
    core::writeFileAtomic(stateDir / "state.json", nlohmann::json{{"step", step},
                                                                  {"checkpoint", name},
                                                                  {"settings", settings},
                                                                  {"window_loss", window.loss},
                                                                  {"window_steps", window.steps},
                                                                  {"evaluations", evals}}
                                                       .dump(1));
    // older checkpoints are no longer referenced
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(stateDir, ec))
        if (entry.is_directory() && entry.path().filename() != name &&
            entry.path().filename().string().starts_with("step-"))
            fs::remove_all(entry.path(), ec);
}

// The parameters being trained with the RoPE tables their forward uses.
struct Net
{
    Params p;
    std::vector<torch::Tensor> cosT, sinT; // [layers] x [seqLen, half]
};

// Each layer's RoPE angles for positions [0, seqLen), as cos and sin tables [seqLen, half].
void buildRopeTables(Net &net, const core::ModelConfig &c, int seqLen)
{
    for (int l = 0; l < c.numLayers; ++l) {
        const auto inv = c.ropeInvFreq(l);
        std::vector<float> invf(inv.begin(), inv.end());
        auto invT = torch::from_blob(invf.data(), {int64_t(invf.size())}, torch::kFloat32).clone();
        auto ang = torch::arange(seqLen, torch::kFloat32).unsqueeze(1) * invT.unsqueeze(0); // [T, half]
        net.cosT.push_back(ang.cos());
        net.sinT.push_back(ang.sin());
    }
}

// Mean loss over the fixed validation rows, forwarded batchSize rows at a time.
double evaluateRows(const Net &net, const core::ModelConfig &c, const torch::Tensor &valRows,
                    const TrainOptions &o)
{
    torch::NoGradGuard ng;
    double total = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < valRows.size(0); r += o.batchSize) {
        auto rows = valRows.narrow(0, r, std::min<int64_t>(o.batchSize, valRows.size(0) - r));
        auto logits = forward(net.p, c, net.cosT, net.sinT, rows.narrow(1, 0, o.seqLen));
        total += lossOf(logits, rows.narrow(1, 1, o.seqLen)).item<double>() * double(rows.size(0));
        n += rows.size(0);
    }
    return total / double(n);
}

// One optimizer step on step's batch; the progress it returns has no timing or validation loss.
TrainProgress trainStep(Net &net, torch::optim::AdamW &opt, const core::ModelConfig &c, const Stream &train,
                        const TrainOptions &o, int step)
{
    const double lr = lrAt(o, step);
    for (auto &g : opt.param_groups())
        static_cast<torch::optim::AdamWOptions &>(g.options()).lr(lr);
    auto batch = trainBatch(train, o, step);
    torch::Tensor loss;
    {
        torch::AutoGradMode enable(true);
        opt.zero_grad();
        auto logits = forward(net.p, c, net.cosT, net.sinT, batch.narrow(1, 0, o.seqLen));
        loss = lossOf(logits, batch.narrow(1, 1, o.seqLen));
        loss.backward();
    }
    const double gradNorm = torch::nn::utils::clip_grad_norm_(net.p.tensors, o.gradClip);
    opt.step();
    TrainProgress tp;
    tp.step = step + 1;
    tp.steps = o.steps;
    tp.loss = loss.item<double>();
    tp.lr = lr;
    tp.gradNorm = gradNorm;
    return tp;
}

// Copies the tokenizer file into the model directory unless it is already there.
void copyTokenizer(const fs::path &tokenizerFile, const fs::path &outDir)
{
    const fs::path dest = outDir / tokenizerFile.filename();
    if (fs::absolute(tokenizerFile) != fs::absolute(dest)) {
        std::error_code ec;
        fs::copy_file(tokenizerFile, dest, fs::copy_options::overwrite_existing, ec);
        if (ec)
            throw Error(ErrorCode::Io, tokenizerFile.string() + ": cannot copy tokenizer: " + ec.message());
    }
}

// Writes outDir/train_log.json: the settings, the data sizes and the losses of a finished run.
void writeTrainLog(const TrainOptions &o, const TrainData &data, const TrainResult &result, int threads,
                   const fs::path &outDir)
{
    nlohmann::json log = {{"steps", result.stepsDone},
                          {"seconds", result.seconds},
                          {"seq_len", o.seqLen},
                          {"batch_size", o.batchSize},
                          {"lr", o.lr},
                          {"min_lr", o.minLr},
                          {"warmup_steps", o.warmupSteps},
                          {"weight_decay", o.weightDecay},
                          {"grad_clip", o.gradClip},
                          {"seed", o.seed},
                          {"threads", threads},
                          {"train_documents", data.train.size()},
                          {"validation_documents", data.validation.size()},
                          {"final_loss", result.finalLoss},
                          {"final_val_loss", result.finalValLoss},
                          {"val_perplexity", std::exp(result.finalValLoss)}};
    if (!o.shard.empty())
        log["shard"] = o.shard;
    nlohmann::json ev = nlohmann::json::array();
    for (const auto &e : result.evaluations)
        ev.push_back({{"step", e.step}, {"loss", e.loss}, {"val_loss", e.valLoss.value_or(0.0)}});
    log["evaluations"] = ev;
    core::writeFileAtomic(outDir / "train_log.json", log.dump(1));
}

} // namespace

TrainResult trainModel(const TrainOptions &o, const TrainData &data, const fs::path &outDir,
                       const std::optional<fs::path> &tokenizerFile, const TrainProgressFn &progress)
{
    const core::ModelConfig &c = o.model;
    checkTrainable(o, data);
    const Stream train = buildStream(data.train, c.vocabSize, "training");
    const Stream val = buildStream(data.validation, c.vocabSize, "validation");
    std::error_code ec;
    fs::create_directories(outDir / "train_state", ec);
    if (ec)
        throw Error(ErrorCode::Io, outDir.string() + ": cannot create directory: " + ec.message());

    const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(threads);
    torch::NoGradGuard noGradInit;
    Net net{initParams(c, o.seed), {}, {}};
    Params &p = net.p;
    if (!o.initFrom.empty())
        loadInitialWeights(p, o.initFrom);
    torch::optim::AdamW opt(paramGroups(p, o), torch::optim::AdamWOptions(o.lr));

    TrainResult result;
    int startStep = 0;
    LossWindow window;
    const fs::path stateDir = outDir / "train_state";
    const nlohmann::json settings = runSettings(o, train, val);
    if (o.resume && fs::exists(stateDir / "state.json"))
        startStep = restoreState(stateDir, settings, p, opt, window, result);

    buildRopeTables(net, c, o.seqLen);
    const auto valRows = validationRows(val, o);
    auto evaluate = [&] { return evaluateRows(net, c, valRows, o); };
    auto save = [&](int step) { saveState(stateDir, step, p, opt, settings, window, result.evaluations); };

    const auto t0 = std::chrono::steady_clock::now();
    int64_t tokensSeen = 0;
    int step = startStep;
    for (; step < o.steps; ++step) {
        TrainProgress tp = trainStep(net, opt, c, train, o, step);
        tokensSeen += int64_t(o.batchSize) * o.seqLen;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        tp.tokensPerSecond = secs > 0 ? double(tokensSeen) / secs : 0;
        window.loss += tp.loss;
        ++window.steps;
        if (!std::isfinite(tp.loss))
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("training diverged at step {} (loss is not finite); lower the learning rate",
                            tp.step));
        const bool evalNow = (o.evalEvery > 0 && tp.step % o.evalEvery == 0) || tp.step == o.steps;
        if (evalNow) {
            tp.valLoss = evaluate();
            TrainProgress e = tp;
            e.loss = window.loss / window.steps;
            result.evaluations.push_back(e);
            result.finalLoss = e.loss;
            result.finalValLoss = *tp.valLoss;
            window = LossWindow{};
        }
        if (o.checkpointEvery > 0 && tp.step % o.checkpointEvery == 0 && tp.step < o.steps)
            save(tp.step);
        if (progress && !progress(tp)) {
            save(tp.step);
            result.cancelled = true;
            result.stepsDone = tp.step;
            result.seconds = secs;
            return result;
        }
    }
    result.stepsDone = step;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (result.evaluations.empty() || result.evaluations.back().step != step) {
        result.finalValLoss = evaluate();
    } else { // e.g. resuming a run that had already finished: report its last evaluation
        result.finalValLoss = *result.evaluations.back().valLoss;
        result.finalLoss = result.evaluations.back().loss;
    }
    save(step);
    writeModel(p, c, o, outDir);
    if (tokenizerFile)
        copyTokenizer(*tokenizerFile, outDir);
    writeTrainLog(o, data, result, threads, outDir);
    return result;
}

double validationLoss(const fs::path &modelDir, const TrainOptions &o, const TrainData &data)
{
    auto model = Model::load(modelDir, LoadOptions{Device::Cpu, FloatType::F32, o.threads});
    const Stream val = buildStream(data.validation, model->config().vocabSize, "validation");
    const auto rows = validationRows(val, o);
    const int vocab = model->config().vocabSize;
    double total = 0;
    for (int64_t r = 0; r < rows.size(0); ++r) {
        const auto *row = rows[r].data_ptr<int64_t>();
        std::vector<int> ids(row, row + o.seqLen);
        auto cache = model->newCache();
        const auto logits = model->forward(ids, cache, true);
        double rowLoss = 0;
        for (int t = 0; t < o.seqLen; ++t) {
            const float *l = logits.data() + size_t(t) * size_t(vocab);
            const double mx = *std::max_element(l, l + vocab);
            double z = 0;
            for (int i = 0; i < vocab; ++i)
                z += std::exp(double(l[i]) - mx);
            rowLoss += (mx + std::log(z)) - double(l[row[t + 1]]);
        }
        total += rowLoss / o.seqLen;
    }
    return total / double(rows.size(0));
}

} // namespace kvwb::gpu
