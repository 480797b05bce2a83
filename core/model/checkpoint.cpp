#include "core/model/checkpoint.h"

#include "core/model/gguf_model.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/sha256.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>

namespace kvwb::core {

namespace fs = std::filesystem;

const char *checkpointFormatName(CheckpointFormat f) noexcept
{
    switch (f) {
    case CheckpointFormat::HfSafetensors:
        return "hf-safetensors";
    case CheckpointFormat::Llama2cLegacy:
        return "llama2c-legacy";
    case CheckpointFormat::Llama2cV1:
        return "llama2c-v1";
    case CheckpointFormat::Gguf:
        return "gguf";
    }
    return "unknown";
}

namespace {

constexpr uint32_t kLlama2cMagic = 0x616b3432; // "ak42"
constexpr uint64_t kLegacyHeaderBytes = 7 * 4;
constexpr uint64_t kV1HeaderBytes = 256;

std::string shapeString(const std::vector<int64_t> &shape)
{
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string layerName(int layer, const char *suffix)
{
    return fmt::format("model.layers.{}.{}", layer, suffix);
}

// The seven int32 of a llama2.c header, with vocab made positive and the classifier flag split out.
struct Llama2cDims
{
    int64_t dim = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0, vocab = 0, seqLen = 0;
    bool shared = true; // classifier shares the token embedding
    int64_t headSize() const { return dim / heads; }
    int64_t kvDim() const { return kvHeads * headSize(); }
};

// One stretch of float32s in file order; an empty name is a stretch to skip (legacy freq_cis).
struct Slot
{
    std::string name;
    std::vector<int64_t> shape; // torch order
    int64_t numel() const
    {
        int64_t n = 1;
        for (int64_t d : shape)
            n *= d;
        return n;
    }
};

// File bytes a header implies, in 128 bits so that a corrupt header cannot wrap around.
unsigned __int128 llama2cExpectedBytes(const Llama2cDims &d, int version)
{
    using U = unsigned __int128;
    const U D = U(d.dim), H = U(d.hidden), L = U(d.layers), V = U(d.vocab), kv = U(d.kvDim());
    const U perLayer = 2 * D + D * D + 2 * kv * D + D * D + 3 * D * H;
    U floats = V * D + L * perLayer + D;
    if (version == 0)
        floats +=
            U(d.seqLen) * U(d.headSize()); // freq_cis_real + freq_cis_imag, seq_len * head_size / 2 each
    if (!d.shared)
        floats += V * D;
    return (version == 0 ? kLegacyHeaderBytes : kV1HeaderBytes) + 4 * floats;
}

// Tensor order of karpathy/llama2.c export.py: legacy_export (version 0) and version1_export.
std::vector<Slot> llama2cLayout(const Llama2cDims &d, int version)
{
    std::vector<Slot> out;
    const int L = int(d.layers);
    const auto perLayer = [&](const char *suffix, std::vector<int64_t> shape) {
        for (int i = 0; i < L; ++i)
            out.push_back({layerName(i, suffix), shape});
    };
    const std::vector<int64_t> embed{d.vocab, d.dim};
    if (version == 0) {
        out.push_back({"model.embed_tokens.weight", embed});
        perLayer("input_layernorm.weight", {d.dim});
        perLayer("self_attn.q_proj.weight", {d.dim, d.dim});
        perLayer("self_attn.k_proj.weight", {d.kvDim(), d.dim});
        perLayer("self_attn.v_proj.weight", {d.kvDim(), d.dim});
        perLayer("self_attn.o_proj.weight", {d.dim, d.dim});
        perLayer("post_attention_layernorm.weight", {d.dim});
        perLayer("mlp.gate_proj.weight", {d.hidden, d.dim}); // w1
        perLayer("mlp.down_proj.weight", {d.dim, d.hidden}); // w2
        perLayer("mlp.up_proj.weight", {d.hidden, d.dim});   // w3
        out.push_back({"model.norm.weight", {d.dim}});
        out.push_back({"", {d.seqLen * d.headSize() / 2}}); // freq_cis_real
        out.push_back({"", {d.seqLen * d.headSize() / 2}}); // freq_cis_imag
    } else {
        perLayer("input_layernorm.weight", {d.dim});
        perLayer("post_attention_layernorm.weight", {d.dim});
        out.push_back({"model.norm.weight", {d.dim}});
        out.push_back({"model.embed_tokens.weight", embed});
        perLayer("self_attn.q_proj.weight", {d.dim, d.dim});
        perLayer("self_attn.k_proj.weight", {d.kvDim(), d.dim});
        perLayer("self_attn.v_proj.weight", {d.kvDim(), d.dim});
        perLayer("self_attn.o_proj.weight", {d.dim, d.dim});
        perLayer("mlp.gate_proj.weight", {d.hidden, d.dim});
        perLayer("mlp.down_proj.weight", {d.dim, d.hidden});
        perLayer("mlp.up_proj.weight", {d.hidden, d.dim});
    }
    if (!d.shared)
        out.push_back({"lm_head.weight", embed});
    return out;
}

int32_t readI32(const std::byte *p)
{
    int32_t v;
    std::memcpy(&v, p, 4); // llama2.c files are little-endian, as is every host we build for
    return v;
}

// Rows of a [heads * headDim, in] projection (or a [heads * headDim] bias, in == 1) from
// interleaved pairs (2j, 2j + 1) to HF's rotate-half order (j, headDim / 2 + j), per head. This is
// the inverse of nothing: it *is* HF's permute(w, n_heads) from convert_llama_weights_to_hf.py.
std::vector<float> interleavedToHalf(const std::vector<float> &w, int64_t heads, int64_t headDim, int64_t in)
{
    std::vector<float> out(w.size());
    const int64_t half = headDim / 2;
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < half; ++j) {
            const float *even = &w[size_t((h * headDim + 2 * j) * in)];
            const float *odd = &w[size_t((h * headDim + 2 * j + 1) * in)];
            std::memcpy(&out[size_t((h * headDim + j) * in)], even, size_t(in) * sizeof(float));
            std::memcpy(&out[size_t((h * headDim + half + j) * in)], odd, size_t(in) * sizeof(float));
        }
    }
    return out;
}

} // namespace

struct Checkpoint::Impl
{
    ModelConfig config;
    CheckpointFormat format = CheckpointFormat::HfSafetensors;
    fs::path path; // as given to open()
    fs::path dir;  // model directory (HF) or the directory holding the .bin

    std::optional<WeightSet> weights; // HF

    std::shared_ptr<const MappedFile> bin;                     // llama2.c
    std::map<std::string, TensorInfo, std::less<>> binTensors; // llama2.c; offset is from file start

    std::optional<GgufFile> gguf;         // GGUF
    std::optional<GgufModel> ggufTensors; // GGUF: its tensors under HF names

    // Phi-3's fused projections shown split under the Llama names: row ranges of the fused
    // tensor (a row-major [out, in] matrix's rows are contiguous).
    struct View
    {
        TensorInfo info;
        const std::byte *data = nullptr;
        fs::path file;
    };
    std::map<std::string, View, std::less<>> views;

    mutable std::mutex fingerprintMutex;
    mutable std::optional<std::string> fingerprint;

    std::string weightSource() const
    {
        return weights ? weights->source().string() : gguf ? gguf->path().string() : bin->path().string();
    }

    std::optional<TensorRef> find(std::string_view name) const
    {
        if (const auto v = views.find(name); v != views.end())
            return TensorRef{&v->second.info, v->second.data, v->second.file};
        if (weights) {
            if (!weights->contains(name))
                return std::nullopt;
            return weights->get(name);
        }
        if (ggufTensors) {
            const auto g = ggufTensors->tensors.find(name);
            if (g == ggufTensors->tensors.end())
                return std::nullopt;
            return TensorRef{&g->second.info, g->second.data, gguf->path()};
        }
        const auto it = binTensors.find(name);
        if (it == binTensors.end())
            return std::nullopt;
        return TensorRef{&it->second, bin->data() + it->second.offset, bin->path()};
    }

    // Phi-3: qkv_proj [q + 2 kv, hidden] -> q_proj, k_proj, v_proj; gate_up_proj [2 inter, hidden]
    // -> gate_proj, up_proj (Phi3MLP chunks gate first). Error(Shape) naming a fused tensor that is
    // missing or of another shape.
    void splitFusedProjections()
    {
        const ModelConfig &c = config;
        const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                      kv = int64_t(c.numKvHeads) * c.headDim, inter = c.intermediateSize;
        const auto split = [&](const std::string &fused, const std::vector<int64_t> &shape,
                               const std::vector<std::pair<const char *, int64_t>> &parts, int layer) {
            const auto ref = find(fused);
            if (!ref)
                throw Error(ErrorCode::Shape,
                            fmt::format("{}: tensor '{}' is missing", weightSource(), fused));
            if (ref->info->shape != shape)
                throw Error(ErrorCode::Shape,
                            fmt::format("{}: tensor '{}' has shape {}, expected {}", ref->file.string(),
                                        fused, shapeString(ref->info->shape), shapeString(shape)));
            const uint64_t rowBytes = ref->info->bytes / uint64_t(shape[0]);
            int64_t row = 0;
            for (const auto &[suffix, rows] : parts) {
                View v;
                v.info.name = layerName(layer, suffix);
                v.info.dtype = ref->info->dtype;
                v.info.shape = {rows, shape[1]};
                v.info.offset = ref->info->offset + uint64_t(row) * rowBytes;
                v.info.bytes = uint64_t(rows) * rowBytes;
                v.data = ref->data + uint64_t(row) * rowBytes;
                v.file = ref->file;
                row += rows;
                views.emplace(v.info.name, std::move(v));
            }
        };
        for (int l = 0; l < c.numLayers; ++l) {
            split(layerName(l, "self_attn.qkv_proj.weight"), {q + 2 * kv, h},
                  {{"self_attn.q_proj.weight", q},
                   {"self_attn.k_proj.weight", kv},
                   {"self_attn.v_proj.weight", kv}},
                  l);
            split(layerName(l, "mlp.gate_up_proj.weight"), {2 * inter, h},
                  {{"mlp.gate_proj.weight", inter}, {"mlp.up_proj.weight", inter}}, l);
        }
    }
};

namespace {

struct Llama2cData
{
    std::shared_ptr<const MappedFile> bin;
    std::map<std::string, TensorInfo, std::less<>> tensors; // offset is from the start of the file
    ModelConfig config;
    CheckpointFormat format = CheckpointFormat::Llama2cLegacy;
};

Llama2cData openLlama2c(const fs::path &path)
{
    Llama2cData impl;
    impl.bin = MappedFile::open(path);
    const std::string file = path.string();
    const uint64_t size = impl.bin->size();
    const std::byte *p = impl.bin->data();
    int version = 0;
    uint64_t headerBytes = kLegacyHeaderBytes;
    if (size >= 4 && uint32_t(readI32(p)) == kLlama2cMagic) {
        headerBytes = kV1HeaderBytes;
        if (size < headerBytes)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: file is {} bytes, shorter than the {}-byte llama2.c "
                                    "version-1 header",
                                    file, size, headerBytes));
        version = readI32(p + 4);
        if (version != 1)
            throw Error(
                ErrorCode::Unsupported,
                fmt::format("{}: llama2.c export version {} is not supported (only float32 versions 0 and 1)",
                            file, version));
        p += 8;
    } else if (size < headerBytes) {
        throw Error(ErrorCode::Format,
                    fmt::format("{}: file is {} bytes, shorter than the {}-byte llama2.c header", file, size,
                                headerBytes));
    }

    // A text file (notes, a config, a README picked by mistake) reads as huge header fields: say so.
    {
        const size_t n = std::min<uint64_t>(size, 28);
        bool text = n >= 16;
        for (size_t i = 0; i < n && text; ++i) {
            const auto c = std::to_integer<uint8_t>(impl.bin->data()[i]);
            text = c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7f) || c >= 0x80;
        }
        if (text)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: not a model: the file starts with text, not a llama2.c header (kvwb "
                                    "reads Hugging Face model folders, .gguf files and llama2.c .bin "
                                    "checkpoints)",
                                    file));
    }
    Llama2cDims d;
    const char *names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    int64_t *fields[] = {&d.dim, &d.hidden, &d.layers, &d.heads, &d.kvHeads, &d.vocab, &d.seqLen};
    for (int i = 0; i < 7; ++i)
        *fields[i] = readI32(p + 4 * i);
    if (version == 0) {
        // Legacy files flag a separate classifier with a negative vocab_size.
        d.shared = d.vocab > 0;
        d.vocab = d.vocab < 0 ? -d.vocab : d.vocab;
    } else {
        d.shared = std::to_integer<uint8_t>(p[28]) != 0;
    }
    for (int i = 0; i < 7; ++i) {
        if (*fields[i] <= 0)
            throw Error(ErrorCode::Format, fmt::format("{}: llama2.c header field {} is {}, must be positive",
                                                       file, names[i], *fields[i]));
    }
    if (d.dim % d.heads != 0)
        throw Error(
            ErrorCode::Format,
            fmt::format("{}: llama2.c header: dim {} is not divisible by n_heads {}", file, d.dim, d.heads));
    if (d.heads % d.kvHeads != 0)
        throw Error(ErrorCode::Format,
                    fmt::format("{}: llama2.c header: n_heads {} is not a multiple of n_kv_heads {}", file,
                                d.heads, d.kvHeads));
    if (d.headSize() % 2 != 0)
        throw Error(ErrorCode::Format,
                    fmt::format("{}: llama2.c header: head size {} (dim / n_heads) is odd; RoPE needs pairs",
                                file, d.headSize()));
    const unsigned __int128 expected = llama2cExpectedBytes(d, version);
    if (expected != size) {
        const std::string exp = expected > std::numeric_limits<uint64_t>::max()
                                    ? std::string("more than 2^64")
                                    : std::to_string(uint64_t(expected));
        throw Error(
            ErrorCode::Format,
            fmt::format(
                "{}: llama2.c {} header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, "
                "vocab_size {}, seq_len {}, {} classifier) implies {} bytes but the file has {} bytes",
                file, version == 0 ? "legacy" : "version-1", d.dim, d.hidden, d.layers, d.heads, d.kvHeads,
                d.vocab, d.seqLen, d.shared ? "shared" : "separate", exp, size));
    }

    uint64_t offset = headerBytes;
    for (const Slot &s : llama2cLayout(d, version)) {
        const uint64_t bytes = uint64_t(s.numel()) * 4;
        if (!s.name.empty()) {
            TensorInfo t;
            t.name = s.name;
            t.dtype = DType::F32;
            t.shape = s.shape;
            t.offset = offset;
            t.bytes = bytes;
            impl.tensors.emplace(s.name, std::move(t));
        }
        offset += bytes;
    }

    ModelConfig &c = impl.config;
    c.architecture = "Llama2c";
    c.modelType = "llama2c";
    c.hiddenSize = int(d.dim);
    c.intermediateSize = int(d.hidden);
    c.numLayers = int(d.layers);
    c.numHeads = int(d.heads);
    c.numKvHeads = int(d.kvHeads);
    c.headDim = int(d.headSize());
    c.vocabSize = int(d.vocab);
    c.maxPositionEmbeddings = int(d.seqLen);
    c.rmsNormEps = 1e-5;   // model.py ModelArgs.norm_eps
    c.ropeTheta = 10000.0; // run.c hard-codes 10000.0f
    c.ropeLayout = RopeLayout::Interleaved;
    c.tieWordEmbeddings = d.shared;
    c.bosTokenId = 1; // Llama 2 sentencepiece ids; run.c's generate() starts from BOS=1
    c.eosTokenIds = {2};
    c.torchDtype = "float32";
    impl.format = version == 0 ? CheckpointFormat::Llama2cLegacy : CheckpointFormat::Llama2cV1;
    c.validate(file);
    return impl;
}

} // namespace

Checkpoint Checkpoint::open(const fs::path &path)
{
    auto impl = std::make_shared<Impl>();
    impl->path = path;
    const std::string ext = path.extension().string();
    if (fs::is_directory(path) || ext == ".json" || ext == ".safetensors") {
        impl->format = CheckpointFormat::HfSafetensors;
        impl->dir = fs::is_directory(path) ? path : path.parent_path();
        if (impl->dir.empty())
            impl->dir = ".";
        impl->config = ModelConfig::fromHfJsonFile(impl->dir / "config.json");
        const bool weightFile = ext == ".safetensors" || path.filename().string().ends_with(".index.json");
        impl->weights = WeightSet::open(weightFile ? path : impl->dir);
        if (impl->config.fusedProjections)
            impl->splitFusedProjections();
    } else if (ext == ".gguf" || GgufFile::looksLikeGguf(path)) {
        impl->format = CheckpointFormat::Gguf;
        impl->dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
        impl->gguf = GgufFile::open(path);
        impl->ggufTensors = ggufModel(*impl->gguf);
        impl->config = impl->ggufTensors->config;
        if (impl->config.fusedProjections)
            impl->splitFusedProjections();
    } else {
        impl->dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
        Llama2cData data = openLlama2c(path);
        impl->bin = std::move(data.bin);
        impl->binTensors = std::move(data.tensors);
        impl->config = std::move(data.config);
        impl->format = data.format;
    }
    Checkpoint c;
    c.m_impl = std::move(impl);
    c.validateTensors();
    return c;
}

const ModelConfig &Checkpoint::config() const
{
    return m_impl->config;
}
CheckpointFormat Checkpoint::format() const
{
    return m_impl->format;
}
const fs::path &Checkpoint::path() const
{
    return m_impl->path;
}

bool Checkpoint::contains(const std::string &hfName) const
{
    return m_impl->find(hfName).has_value();
}

TensorRef Checkpoint::require(const std::string &hfName, const std::vector<int64_t> &expectedShape) const
{
    const auto ref = m_impl->find(hfName);
    if (!ref)
        throw Error(ErrorCode::Shape,
                    fmt::format("{}: tensor '{}' is missing", m_impl->weightSource(), hfName));
    if (!expectedShape.empty() && ref->info->shape != expectedShape)
        throw Error(ErrorCode::Shape,
                    fmt::format("{}: tensor '{}' has shape {}, expected {}", ref->file.string(), hfName,
                                shapeString(ref->info->shape), shapeString(expectedShape)));
    return *ref;
}

std::vector<std::string> Checkpoint::tensorNames() const
{
    if (m_impl->weights)
        return m_impl->weights->names();
    std::vector<std::string> out;
    if (m_impl->ggufTensors) {
        for (const auto &[name, t] : m_impl->ggufTensors->tensors)
            out.push_back(name);
        return out;
    }
    for (const auto &[name, info] : m_impl->binTensors)
        out.push_back(name);
    return out;
}

uint64_t Checkpoint::weightBytes() const
{
    if (m_impl->weights)
        return m_impl->weights->totalBytes();
    uint64_t total = 0;
    if (m_impl->ggufTensors) {
        for (const auto &[name, t] : m_impl->ggufTensors->tensors)
            total += t.info.bytes;
        return total;
    }
    for (const auto &[name, info] : m_impl->binTensors)
        total += info.bytes;
    return total;
}

void Checkpoint::validateTensors() const
{
    const ModelConfig &c = m_impl->config;
    const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                  kv = int64_t(c.numKvHeads) * c.headDim;
    const int64_t inter = c.intermediateSize, v = c.vocabSize;
    std::vector<std::pair<std::string, std::vector<int64_t>>> need;
    need.push_back({"model.embed_tokens.weight", {v, h}});
    for (int i = 0; i < c.numLayers; ++i) {
        need.push_back({layerName(i, "input_layernorm.weight"), {h}});
        need.push_back({layerName(i, "self_attn.q_proj.weight"), {q, h}});
        need.push_back({layerName(i, "self_attn.k_proj.weight"), {kv, h}});
        need.push_back({layerName(i, "self_attn.v_proj.weight"), {kv, h}});
        need.push_back({layerName(i, "self_attn.o_proj.weight"), {h, q}});
        if (c.qkvBias) {
            need.push_back({layerName(i, "self_attn.q_proj.bias"), {q}});
            need.push_back({layerName(i, "self_attn.k_proj.bias"), {kv}});
            need.push_back({layerName(i, "self_attn.v_proj.bias"), {kv}});
        }
        if (c.oBias)
            need.push_back({layerName(i, "self_attn.o_proj.bias"), {h}});
        if (c.qkNorm) {
            need.push_back({layerName(i, "self_attn.q_norm.weight"), {c.headDim}});
            need.push_back({layerName(i, "self_attn.k_norm.weight"), {c.headDim}});
        }
        need.push_back({layerName(i, "post_attention_layernorm.weight"), {h}});
        if (c.sandwichNorms) { // Gemma: around the MLP
            need.push_back({layerName(i, "pre_feedforward_layernorm.weight"), {h}});
            need.push_back({layerName(i, "post_feedforward_layernorm.weight"), {h}});
        }
        need.push_back({layerName(i, "mlp.gate_proj.weight"), {inter, h}});
        need.push_back({layerName(i, "mlp.up_proj.weight"), {inter, h}});
        need.push_back({layerName(i, "mlp.down_proj.weight"), {h, inter}});
        if (c.mlpBias) {
            need.push_back({layerName(i, "mlp.gate_proj.bias"), {inter}});
            need.push_back({layerName(i, "mlp.up_proj.bias"), {inter}});
            need.push_back({layerName(i, "mlp.down_proj.bias"), {h}});
        }
    }
    need.push_back({"model.norm.weight", {h}});
    // Tied checkpoints may still carry a copy of lm_head.weight; the model ignores it, so do we.
    if (!c.tieWordEmbeddings)
        need.push_back({"lm_head.weight", {v, h}});

    for (const auto &[name, shape] : need) {
        const TensorRef ref = require(name, shape);
        const DType t = ref.info->dtype;
        if (t != DType::F32 && t != DType::F16 && t != DType::BF16 && !isBlockQuantized(t))
            throw Error(ErrorCode::Shape,
                        fmt::format("{}: tensor '{}' has dtype {}, expected F32, F16, BF16 or a GGUF "
                                    "quantised type",
                                    ref.file.string(), name, dtypeName(t)));
    }
    // Tensors and config agree exactly: weights of a layer past the configured count mean the
    // config is wrong (a 2-layer file with block_count or num_hidden_layers 1 would run truncated).
    for (const std::string &name : tensorNames()) {
        constexpr std::string_view prefix = "model.layers.";
        if (!name.starts_with(prefix))
            continue;
        const size_t dot = name.find('.', prefix.size());
        const std::string index =
            name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
        if (index.empty() || index.size() > 9 || !std::all_of(index.begin(), index.end(), ::isdigit))
            continue;
        if (std::stoll(index) >= c.numLayers)
            throw Error(
                ErrorCode::Config,
                fmt::format("{}: tensor '{}' belongs to layer {}, but the configuration gives {} "
                            "layer(s) (num_hidden_layers / block_count); tensors and config must agree",
                            m_impl->path.string(), name, index, c.numLayers));
    }
}

std::optional<fs::path> Checkpoint::tokenizerPath() const
{
    if (m_impl->gguf) // the tokenizer is in the file's metadata (core/tokenize/gguf_tokenizer.h)
        return m_impl->gguf->find("tokenizer.ggml.model") ? std::optional<fs::path>(m_impl->path)
                                                          : std::nullopt;
    const std::vector<const char *> candidates =
        m_impl->weights ? std::vector<const char *>{"tokenizer.json", "tokenizer.model", "tokenizer.bin"}
                        : std::vector<const char *>{"tokenizer.bin"};
    for (const char *name : candidates) {
        const fs::path p = m_impl->dir / name;
        if (fs::is_regular_file(p))
            return p;
    }
    return std::nullopt;
}

std::string Checkpoint::fingerprint() const
{
    std::lock_guard lock(m_impl->fingerprintMutex);
    if (!m_impl->fingerprint) {
        const std::vector<fs::path> files = m_impl->weights ? m_impl->weights->files()
                                            : m_impl->gguf  ? std::vector<fs::path>{m_impl->gguf->path()}
                                                            : std::vector<fs::path>{m_impl->bin->path()};
        m_impl->fingerprint = sha256Files(files);
    }
    return *m_impl->fingerprint;
}

void convertToHf(const Checkpoint &from, const fs::path &outDir)
{
    std::error_code ec;
    fs::create_directories(outDir, ec);
    if (ec)
        throw Error(ErrorCode::Io,
                    fmt::format("{}: cannot create directory: {}", outDir.string(), ec.message()));

    ModelConfig cfg = from.config();
    const bool interleaved = cfg.ropeLayout == RopeLayout::Interleaved;
    cfg.modelType = "llama";
    cfg.architecture = "LlamaForCausalLM";
    cfg.ropeLayout = RopeLayout::RotateHalf;

    SafetensorsWriter writer;
    for (const std::string &name : from.tensorNames()) {
        if (cfg.tieWordEmbeddings && name == "lm_head.weight")
            continue;
        const TensorRef ref = from.require(name, {});
        std::vector<float> data = toFloatVector(ref);
        const std::vector<int64_t> &shape = ref.info->shape;
        if (interleaved) {
            const bool isQ = name.find(".self_attn.q_proj.") != std::string::npos;
            const bool isK = name.find(".self_attn.k_proj.") != std::string::npos;
            if (isQ || isK) {
                const int64_t in = shape.size() == 2 ? shape[1] : 1;
                data = interleavedToHalf(data, isQ ? cfg.numHeads : cfg.numKvHeads, cfg.headDim, in);
            }
        }
        writer.addF32(name, shape, data);
    }
    writer.setMetadata("format", "pt");
    writeFileAtomic(outDir / "config.json", cfg.toHfJson());
    writer.write(outDir / "model.safetensors");

    if (const auto tok = from.tokenizerPath(); tok && from.format() != CheckpointFormat::Gguf) {
        fs::copy_file(*tok, outDir / tok->filename(), fs::copy_options::overwrite_existing, ec);
        if (ec)
            throw Error(ErrorCode::Io, fmt::format("{}: cannot copy tokenizer to {}: {}", tok->string(),
                                                   outDir.string(), ec.message()));
    }
}

void writeLlama2c(const fs::path &out, const ModelConfig &cfg,
                  const std::map<std::string, std::vector<float>> &hfNamedWeights, int version)
{
    if (version != 0 && version != 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: llama2.c version {} cannot be written (0 or 1)", out.string(), version));
    if (cfg.numHeads <= 0 || int64_t(cfg.headDim) * cfg.numHeads != cfg.hiddenSize)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: llama2.c needs head_dim * num_heads == hidden_size, got {} * {} != {}",
                                out.string(), cfg.headDim, cfg.numHeads, cfg.hiddenSize));
    Llama2cDims d;
    d.dim = cfg.hiddenSize;
    d.hidden = cfg.intermediateSize;
    d.layers = cfg.numLayers;
    d.heads = cfg.numHeads;
    d.kvHeads = cfg.numKvHeads;
    d.vocab = cfg.vocabSize;
    d.seqLen = cfg.maxPositionEmbeddings;
    d.shared = cfg.tieWordEmbeddings;

    AtomicFile f(out);
    std::vector<int32_t> header{int32_t(d.dim),     int32_t(d.hidden), int32_t(d.layers), int32_t(d.heads),
                                int32_t(d.kvHeads), int32_t(d.vocab),  int32_t(d.seqLen)};
    if (version == 0) {
        if (!d.shared)
            header[5] = -header[5];
        f.write(std::as_bytes(std::span(header)));
    } else {
        std::vector<std::byte> h(kV1HeaderBytes, std::byte{0});
        const uint32_t magic = kLlama2cMagic;
        const int32_t ver = 1;
        std::memcpy(h.data(), &magic, 4);
        std::memcpy(h.data() + 4, &ver, 4);
        std::memcpy(h.data() + 8, header.data(), 28);
        h[36] = std::byte(d.shared ? 1 : 0);
        f.write(h);
    }
    for (const Slot &s : llama2cLayout(d, version)) {
        if (s.name.empty()) {
            const std::vector<float> zeros(size_t(s.numel()), 0.0f);
            f.write(std::as_bytes(std::span(zeros)));
            continue;
        }
        const auto it = hfNamedWeights.find(s.name);
        if (it == hfNamedWeights.end())
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("{}: tensor '{}' is missing from the weights to write", out.string(), s.name));
        if (int64_t(it->second.size()) != s.numel())
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: tensor '{}' has {} floats, expected {} for shape {}", out.string(),
                                    s.name, it->second.size(), s.numel(), shapeString(s.shape)));
        f.write(std::as_bytes(std::span(it->second)));
    }
    f.commit();
}

} // namespace kvwb::core
