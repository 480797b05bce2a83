// HF config.json parsing, RoPE scaling, validation and serialisation.
#include "core/model/memory_estimate.h"
#include "core/model/model_config.h"
#include "core/model/random_model.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTest>
#include <fmt/format.h>

#include <cmath>
#include <numbers>

using namespace kvwb::core;

Q_DECLARE_METATYPE(kvwb::core::ErrorCode)

namespace {

// Trimmed copies of real configs (field values as published on the Hub).
const char *kLlama2_7b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
  "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16", "pretraining_tp": 1})";

const char *kLlama31_8b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "mlp_bias": false, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "torch_dtype": "bfloat16"})";

const char *kMistral7b = R"({
  "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

const char *kQwen2_05b = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
  "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
  "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
  "attention_bias": false, "bos_token_id": 151643, "eos_token_id": 151643,
  "use_sliding_window": false, "torch_dtype": "bfloat16"})";

const char *kQwen3_06b = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
  "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
  "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": null, "tie_word_embeddings": true,
  "attention_bias": false, "attention_dropout": 0.0, "hidden_act": "silu", "bos_token_id": 151643,
  "eos_token_id": 151645, "sliding_window": null, "use_sliding_window": false, "torch_dtype": "bfloat16"})";

const char *kPhi3Mini4k = R"({
  "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
  "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
  "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "rope_scaling": null, "sliding_window": 2047, "tie_word_embeddings": false, "hidden_act": "silu",
  "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000, "torch_dtype": "bfloat16"})";

const char *kSmolLM135m = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
  "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
  "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 2048,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null,
  "tie_word_embeddings": true, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32"})";

// google/gemma-2-2b: no tie_word_embeddings (Gemma2Config's default, true, applies); both
// activation spellings.
const char *kGemma2_2b = R"({
  "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": false,
  "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2,
  "cache_implementation": "hybrid", "eos_token_id": 1, "final_logit_softcapping": 30.0,
  "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 2304, "initializer_range": 0.02, "intermediate_size": 9216,
  "max_position_embeddings": 8192, "num_attention_heads": 8, "num_hidden_layers": 26,
  "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32", "use_cache": true,
  "vocab_size": 256000})";

// google/gemma-3-1b-it (transformers 4.50): sliding_window_pattern, rope_local_base_freq.
const char *kGemma3_1b = R"({
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": false,
  "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2,
  "cache_implementation": "hybrid", "eos_token_id": [1, 106], "final_logit_softcapping": null,
  "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
  "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
  "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 262144})";

// Gemma 3 4B's text model as transformers >= 5 writes it: layer_types, and rope_parameters keyed by
// layer type (the global layers' linear scaling 8; the local base 10000).
const char *kGemma3_4bText = R"({
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 2560,
  "intermediate_size": 10240, "num_hidden_layers": 8, "num_attention_heads": 8,
  "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072,
  "query_pre_attn_scalar": 256, "sliding_window": 1024,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
  "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
  "dtype": "bfloat16"})";

std::string tiny(const std::string &extra)
{
    return R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 256)" +
           (extra.empty() ? std::string() : ", " + extra) + "}";
}

using kvwb::test::expectError;

bool near(double a, double b)
{
    return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

} // namespace

class TestModelConfig : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void llama2()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kLlama2_7b, "llama2/config.json");
        QCOMPARE(c.modelType, std::string("llama"));
        QCOMPARE(c.architecture, std::string("LlamaForCausalLM"));
        QCOMPARE(c.headDim, 128);
        QCOMPARE(c.numKvHeads, 32);
        QCOMPARE(c.ropeTheta, 10000.0);
        QCOMPARE(c.ropeScaling.type, std::string("default"));
        QCOMPARE(c.rmsNormEps, 1e-5);
        QCOMPARE(c.bosTokenId, std::optional<int>(1));
        QCOMPARE(c.eosTokenIds, std::vector<int>{2});
        QCOMPARE(c.torchDtype, std::string("float16"));
        QVERIFY(!c.qkvBias && !c.oBias && !c.mlpBias && !c.tieWordEmbeddings);
        QCOMPARE(c.ropeLayout, RopeLayout::RotateHalf);
        // Llama-2-7b's published parameter count.
        QCOMPARE(c.parameterCount(), int64_t(6738415616));
        QCOMPARE(c.kvBytesPerToken(2), int64_t(2 * 32 * 32 * 128 * 2)); // 512 KiB per token in f16
        const auto inv = c.ropeInvFreq(0);
        QCOMPARE(inv.size(), size_t(64));
        QCOMPARE(inv[0], 1.0);
        QVERIFY(near(inv[1], std::pow(10000.0, -2.0 / 128.0)));
        QVERIFY(near(inv[63], std::pow(10000.0, -126.0 / 128.0)));
    }

    void llama3RopeScaling()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kLlama31_8b, "llama3/config.json");
        QCOMPARE(c.numKvHeads, 8);
        QCOMPARE(c.ropeTheta, 500000.0);
        QCOMPARE(c.ropeScaling.type, std::string("llama3"));
        QCOMPARE(c.ropeScaling.factor, 8.0);
        QCOMPARE(c.ropeScaling.lowFreqFactor, 1.0);
        QCOMPARE(c.ropeScaling.highFreqFactor, 4.0);
        QCOMPARE(c.ropeScaling.originalMaxPositionEmbeddings, 8192);
        QCOMPARE(c.eosTokenIds, (std::vector<int>{128001, 128008, 128009}));
        QCOMPARE(c.kvBytesPerToken(2), int64_t(131072)); // 128 KiB per token: GQA's 4x saving

        const auto inv = c.ropeInvFreq(0);
        QCOMPARE(inv.size(), size_t(64));
        const auto base = [](int i) { return std::pow(500000.0, -2.0 * i / 128.0); };
        // Wavelengths 2*pi/inv: below 8192/4 = 2048 tokens is high frequency (kept), above 8192/1 is
        // low frequency (divided by 8). i = 0..28 are high, 35..63 low, 29..34 smoothed.
        QCOMPARE(inv[0], 1.0);
        QVERIFY(near(inv[10], base(10)));
        QVERIFY(2 * std::numbers::pi / base(28) < 2048);
        QVERIFY(near(inv[28], base(28)));
        QVERIFY(2 * std::numbers::pi / base(35) > 8192);
        QVERIFY(near(inv[35], base(35) / 8));
        QVERIFY(near(inv[63], base(63) / 8));
        // i = 30: inv = 500000^(-60/128) = 2.131120e-3, wavelen = 2948.30 tokens;
        // smooth = (8192 / 2948.30 - 1) / 3 = 0.592849; result = (1 - s) * inv / 8 + s * inv
        // = 1.3718936e-3 (computed independently in Python).
        const double inv30 = base(30);
        const double wavelen = 2 * std::numbers::pi / inv30;
        QVERIFY(wavelen > 2048 && wavelen < 8192);
        const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
        QVERIFY(std::abs(smooth - 0.592849) < 1e-6);
        QVERIFY(near(inv[30], 1.3718935677611381e-3));
        QVERIFY(near(inv[30], (1 - smooth) * inv30 / 8 + smooth * inv30));
        QVERIFY(inv[30] < inv30 && inv[30] > inv30 / 8);
    }

    void linearRopeScaling()
    {
        const ModelConfig c =
            ModelConfig::fromHfJsonText(tiny(R"("rope_scaling": {"type": "linear", "factor": 4.0})"), "t");
        QCOMPARE(c.ropeScaling.type, std::string("linear"));
        const auto inv = c.ropeInvFreq(0);
        QCOMPARE(inv.size(), size_t(8));
        QCOMPARE(inv[0], 0.25);
        QVERIFY(near(inv[3], std::pow(10000.0, -6.0 / 16.0) / 4));
    }

    void ropeParametersLayout()
    {
        // transformers >= 4.56 writes rope_theta inside rope_parameters; it wins over the top level.
        const ModelConfig c = ModelConfig::fromHfJsonText(
            tiny(R"("rope_theta": 10000.0, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
                   "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192})"),
            "t");
        QCOMPARE(c.ropeTheta, 500000.0);
        QCOMPARE(c.ropeScaling.type, std::string("llama3"));
        QCOMPARE(c.ropeScaling.factor, 32.0);
        const ModelConfig d = ModelConfig::fromHfJsonText(
            tiny(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e6})"), "t");
        QCOMPARE(d.ropeTheta, 1e6);
        QCOMPARE(d.ropeScaling.type, std::string("default"));
    }

    void mistral()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kMistral7b, "m");
        QCOMPARE(c.modelType, std::string("mistral"));
        QCOMPARE(c.architecture, std::string("MistralForCausalLM"));
        QCOMPARE(c.numKvHeads, 8);
        QCOMPARE(c.headDim, 128);
        QCOMPARE(c.maxPositionEmbeddings, 32768);
        QVERIFY(!c.qkvBias && !c.oBias);
        QCOMPARE(c.parameterCount(), int64_t(7241732096)); // Mistral-7B-v0.1
        // v0.1's 4096-token window on every layer; v0.2 and later write null: no window
        QCOMPARE(c.slidingWindow, 4096);
        QVERIFY(c.isSlidingLayer(0) && c.isSlidingLayer(31));
        std::string v02 = kMistral7b;
        v02.replace(v02.find("\"sliding_window\": 4096"), 22, "\"sliding_window\": null");
        const ModelConfig d = ModelConfig::fromHfJsonText(v02, "m2");
        QVERIFY(d.layerAttention.empty() && !d.isSlidingLayer(0));
        QVERIFY(ModelConfig::fromHfJsonText(d.toHfJson(), "rt") == d);
        QVERIFY(ModelConfig::fromHfJsonText(c.toHfJson(), "rt") == c);
    }

    void qwen2BiasForced()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kQwen2_05b, "q");
        QCOMPARE(c.modelType, std::string("qwen2"));
        QVERIFY(c.qkvBias); // even though attention_bias says false
        QVERIFY(!c.oBias);
        QVERIFY(c.tieWordEmbeddings);
        QCOMPARE(c.headDim, 64);
        QCOMPARE(c.ropeTheta, 1e6);
        QCOMPARE(c.rmsNormEps, 1e-6);
        QCOMPARE(c.parameterCount(), int64_t(494032768)); // Qwen2-0.5B
    }

    void qwen3QkNorm()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kQwen3_06b, "q3");
        QCOMPARE(c.modelType, std::string("qwen3"));
        QCOMPARE(c.architecture, std::string("Qwen3ForCausalLM"));
        QVERIFY(c.qkNorm);
        QVERIFY(!c.qkvBias && !c.oBias && !c.mlpBias);
        QCOMPARE(c.headDim, 128);                         // from the config: 1024 / 16 would be 64
        QCOMPARE(c.parameterCount(), int64_t(596049920)); // Qwen3-0.6B: 0.44B non-embedding
        const ModelConfig biased = ModelConfig::fromHfJsonText(
            std::string(kQwen3_06b)
                .replace(std::string(kQwen3_06b).find("\"attention_bias\": false"), 23,
                         "\"attention_bias\": true"),
            "q3b");
        QVERIFY(biased.qkvBias && biased.oBias);
    }

    void phi3Fused()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kPhi3Mini4k, "p3");
        QCOMPARE(c.architecture, std::string("Phi3ForCausalLM"));
        QVERIFY(c.fusedProjections);
        QVERIFY(!c.qkvBias && !c.oBias && !c.mlpBias && !c.qkNorm);
        QCOMPARE(c.parameterCount(), int64_t(3821079552)); // Phi-3-mini-4k
        QCOMPARE(c.slidingWindow, 2047);
        QVERIFY(c.isSlidingLayer(0) && c.isSlidingLayer(c.numLayers - 1));
        std::string partial = kPhi3Mini4k;
        partial.insert(partial.find("\"rope_theta\""), "\"partial_rotary_factor\": 0.75, ");
        const Error e = expectError([&] { ModelConfig::fromHfJsonText(partial, "p3"); });
        QCOMPARE(e.code(), ErrorCode::Unsupported);
        QVERIFY2(std::string(e.what()).find("partial_rotary_factor") != std::string::npos, e.what());
    }

    // Phi-3-mini-128k's LongRoPE: short and long divisors per frequency, the original context at the
    // top level, the attention factor sqrt(1 + ln(131072 / 4096) / ln 4096) = sqrt(17 / 12) that
    // transformers derives; "su" is the older name. The short divisors hold for 4096 positions.
    void phi3LongRope()
    {
        std::string shortF, longF;
        for (int i = 0; i < 48; ++i) {
            shortF += fmt::format("{}{}", i ? ", " : "", 1.0 + 0.01 * i);
            longF += fmt::format("{}{}", i ? ", " : "", 1.0 + 0.5 * i);
        }
        const auto replaced = [](std::string t, const std::string &from, const std::string &to) {
            return t.replace(t.find(from), from.size(), to);
        };
        std::string text =
            replaced(kPhi3Mini4k, "\"max_position_embeddings\": 4096", "\"max_position_embeddings\": 131072");
        text = replaced(
            text, "\"rope_scaling\": null",
            fmt::format(R"("rope_scaling": {{"type": "su", "short_factor": [{}], "long_factor": [{}]}})",
                        shortF, longF));
        ModelConfig c = ModelConfig::fromHfJsonText(text, "p3");
        QCOMPARE(c.ropeScaling.type, std::string("longrope"));
        QCOMPARE(c.ropeScaling.originalMaxPositionEmbeddings, 4096);
        QCOMPARE(c.ropeScaling.factor, 32.0);
        QVERIFY(near(c.ropeScaling.attentionFactor, std::sqrt(17.0 / 12.0)));
        QVERIFY(near(c.ropeAttentionFactor(), 1.1902380714238083));
        QCOMPARE(c.contextLimit(), 4096);
        const auto plain = ModelConfig::fromHfJsonText(kPhi3Mini4k, "p3").ropeInvFreq(0);
        auto inv = c.ropeInvFreq(0);
        QCOMPARE(inv.size(), size_t(48));
        QVERIFY(near(inv[10], plain[10] / 1.1));
        c.ropeScaling.useLongFactor = true;
        inv = c.ropeInvFreq(0);
        QVERIFY(near(inv[10], plain[10] / 6.0));
        QCOMPARE(c.contextLimit(), 131072);
        c.ropeScaling.useLongFactor = false;
        // written back in Phi3Config's layout and read to an equal config
        const auto back = ModelConfig::fromHfJsonText(c.toHfJson(), "back");
        QVERIFY(back == c);
        QVERIFY(c.toHfJson().find("attention_factor") == std::string::npos);
        // an explicit attention_factor wins
        const std::string given =
            replaced(text, "\"type\": \"su\"", "\"type\": \"longrope\", \"attention_factor\": 1.5");
        const auto g = ModelConfig::fromHfJsonText(given, "p3");
        QCOMPARE(g.ropeAttentionFactor(), 1.5);
        QVERIFY(ModelConfig::fromHfJsonText(g.toHfJson(), "back") == g);
        // plain models: no factor, the whole context
        QCOMPARE(ModelConfig::fromHfJsonText(kPhi3Mini4k, "p3").ropeAttentionFactor(), 1.0);
        QCOMPARE(ModelConfig::fromHfJsonText(kPhi3Mini4k, "p3").contextLimit(), 4096);
    }

    void gemma2()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kGemma2_2b, "g2");
        QCOMPARE(c.modelType, std::string("gemma2"));
        QCOMPARE(c.architecture, std::string("Gemma2ForCausalLM"));
        QCOMPARE(c.hiddenSize, 2304);
        QCOMPARE(c.numLayers, 26);
        QCOMPARE(c.numHeads, 8);
        QCOMPARE(c.numKvHeads, 4);
        QCOMPARE(c.headDim, 256); // from the config: 2304 / 8 would be 288
        QCOMPARE(c.intermediateSize, 9216);
        QCOMPARE(c.vocabSize, 256000);
        QVERIFY(c.unitOffsetNorm && c.scaleEmbeddings && c.sandwichNorms);
        QVERIFY(!c.qkNorm && !c.qkvBias && !c.oBias && !c.mlpBias);
        QVERIFY(c.tieWordEmbeddings); // absent from the file
        QCOMPARE(c.activation, MlpActivation::GeluTanh);
        QCOMPARE(c.queryPreAttnScalar, std::optional<double>(256.0));
        QCOMPARE(c.attnLogitSoftcap, std::optional<double>(50.0));
        QCOMPARE(c.finalLogitSoftcap, std::optional<double>(30.0));
        QCOMPARE(c.slidingWindow, 4096);
        // alternating, layer 0 sliding
        QCOMPARE(c.layerAttention.size(), size_t(26));
        for (int l = 0; l < 26; ++l)
            QCOMPARE(c.isSlidingLayer(l), l % 2 == 0);
        QVERIFY(!c.ropeLocalTheta);
        QCOMPARE(c.ropeInvFreq(0), c.ropeInvFreq(1)); // one RoPE for both kinds of layer
        QVERIFY(near(c.ropeInvFreq(1)[1], std::pow(10000.0, -2.0 / 256.0)));
        // Gemma 2 2B's published total: 2,614,341,888 (tied; the four norms per layer counted)
        QCOMPARE(c.parameterCount(), int64_t(2614341888));

        // A soft-cap written as null is off; one left out takes Gemma2Config's default.
        std::string text = kGemma2_2b;
        text.replace(text.find("\"final_logit_softcapping\": 30.0"), 31, "\"final_logit_softcapping\": null");
        text.replace(text.find("\"attn_logit_softcapping\": 50.0, "), 32, "");
        const ModelConfig d = ModelConfig::fromHfJsonText(text, "g2b");
        QVERIFY(!d.finalLogitSoftcap);
        QCOMPARE(d.attnLogitSoftcap, std::optional<double>(50.0));
    }

    void gemma3()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kGemma3_1b, "g3");
        QCOMPARE(c.modelType, std::string("gemma3_text"));
        QCOMPARE(c.architecture, std::string("Gemma3ForCausalLM"));
        QCOMPARE(c.hiddenSize, 1152);
        QCOMPARE(c.numLayers, 26);
        QCOMPARE(c.numHeads, 4);
        QCOMPARE(c.numKvHeads, 1);
        QCOMPARE(c.headDim, 256);
        QCOMPARE(c.intermediateSize, 6912);
        QCOMPARE(c.vocabSize, 262144);
        QVERIFY(c.unitOffsetNorm && c.scaleEmbeddings && c.sandwichNorms && c.qkNorm);
        QVERIFY(c.tieWordEmbeddings);
        QVERIFY(!c.attnLogitSoftcap && !c.finalLogitSoftcap);
        QCOMPARE(c.queryPreAttnScalar, std::optional<double>(256.0));
        QCOMPARE(c.slidingWindow, 512);
        QCOMPARE(c.eosTokenIds, (std::vector<int>{1, 106}));
        // sliding_window_pattern 6: layers 5, 11, 17, 23 are global, the other 22 slide
        int global = 0;
        for (int l = 0; l < 26; ++l) {
            QCOMPARE(c.isSlidingLayer(l), (l + 1) % 6 != 0);
            global += c.isSlidingLayer(l) ? 0 : 1;
        }
        QCOMPARE(global, 4);
        // sliding layers rotate with rope_local_base_freq, global ones with rope_theta
        QCOMPARE(c.ropeLocalTheta, std::optional<double>(10000.0));
        QCOMPARE(c.ropeTheta, 1000000.0);
        QVERIFY(near(c.ropeInvFreq(0)[1], std::pow(10000.0, -2.0 / 256.0)));
        QVERIFY(near(c.ropeInvFreq(5)[1], std::pow(1000000.0, -2.0 / 256.0)));
        QVERIFY(near(c.ropeInvFreq(6)[127], std::pow(10000.0, -254.0 / 256.0)));
        // Gemma 3 1B's published total: 999,885,952 (q/k norms and four norms per layer)
        QCOMPARE(c.parameterCount(), int64_t(999885952));
        QCOMPARE(c.kvBytesPerToken(2), int64_t(2 * 26 * 1 * 256 * 2)); // every layer holds every position
    }

    void gemma3LayerTypesAndRopePerType()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kGemma3_4bText, "g3v5");
        QCOMPARE(c.layerAttention.size(), size_t(8));
        for (int l = 0; l < 8; ++l)
            QCOMPARE(c.isSlidingLayer(l), l != 5);
        QCOMPARE(c.ropeScaling.type, std::string("linear"));
        QCOMPARE(c.ropeScaling.factor, 8.0);
        QCOMPARE(c.ropeTheta, 1000000.0);
        QCOMPARE(c.ropeLocalTheta, std::optional<double>(10000.0));
        QCOMPARE(c.ropeInvFreq(5)[0], 1.0 / 8); // global: scaled
        QCOMPARE(c.ropeInvFreq(0)[0], 1.0);     // local: never scaled
        QVERIFY(near(c.ropeInvFreq(5)[3], std::pow(1e6, -6.0 / 256.0) / 8));
        QVERIFY(near(c.ropeInvFreq(7)[3], std::pow(1e4, -6.0 / 256.0)));
        // layer_types wins over sliding_window_pattern
        std::string text = kGemma3_4bText;
        text.insert(text.find("\"sliding_window\""), "\"sliding_window_pattern\": 2, ");
        QCOMPARE(ModelConfig::fromHfJsonText(text, "g3p").layerAttention, c.layerAttention);
    }

    void smolLmTied()
    {
        const ModelConfig c = ModelConfig::fromHfJsonText(kSmolLM135m, "s");
        QVERIFY(c.tieWordEmbeddings);
        QCOMPARE(c.headDim, 64);
        QCOMPARE(c.numKvHeads, 3);
        QCOMPARE(c.bosTokenId, std::optional<int>(0));
        QCOMPARE(c.parameterCount(), int64_t(134515008)); // SmolLM-135M: no lm_head
    }

    void headDimAndDefaults()
    {
        const ModelConfig explicitHd = ModelConfig::fromHfJsonText(tiny(R"("head_dim": 32)"), "t");
        QCOMPARE(explicitHd.headDim, 32); // != 64 / 4
        const ModelConfig nullHd = ModelConfig::fromHfJsonText(tiny(R"("head_dim": null)"), "t");
        QCOMPARE(nullHd.headDim, 16);
        QCOMPARE(nullHd.numKvHeads, 4);
        QCOMPARE(nullHd.ropeTheta, 10000.0);
        QVERIFY(!nullHd.tieWordEmbeddings);
        QVERIFY(!nullHd.bosTokenId);
        QVERIFY(nullHd.eosTokenIds.empty());
        QCOMPARE(nullHd.architecture, std::string("LlamaForCausalLM"));
        const ModelConfig bias =
            ModelConfig::fromHfJsonText(tiny(R"("attention_bias": true, "mlp_bias": true)"), "t");
        QVERIFY(bias.qkvBias && bias.oBias && bias.mlpBias);
        QCOMPARE(bias.parameterCount() - nullHd.parameterCount(), int64_t(2 * (64 * 3 + 64 + 128 * 2 + 64)));
    }

    void roundTrip_data()
    {
        QTest::addColumn<QString>("json");
        QTest::newRow("llama2") << QString(kLlama2_7b);
        QTest::newRow("llama3") << QString(kLlama31_8b);
        QTest::newRow("mistral") << QString(kMistral7b);
        QTest::newRow("qwen2") << QString(kQwen2_05b);
        QTest::newRow("smollm") << QString(kSmolLM135m);
        QTest::newRow("qwen3") << QString(kQwen3_06b);
        QTest::newRow("phi3") << QString(kPhi3Mini4k);
        QTest::newRow("gemma2") << QString(kGemma2_2b);
        QTest::newRow("gemma3") << QString(kGemma3_1b);
        QTest::newRow("gemma3 layer_types") << QString(kGemma3_4bText);
        QTest::newRow("head_dim+bias")
            << QString::fromStdString(tiny(R"("head_dim": 32, "attention_bias": true)"));
        QTest::newRow("linear") << QString::fromStdString(
            tiny(R"("rope_scaling": {"type": "linear", "factor": 2})"));
    }
    void roundTrip()
    {
        QFETCH(QString, json);
        const ModelConfig c = ModelConfig::fromHfJsonText(json.toStdString(), "a");
        const ModelConfig d = ModelConfig::fromHfJsonText(c.toHfJson(), "b");
        QVERIFY2(c == d, c.toHfJson().c_str());
    }

    // What make-model writes reads back as the preset's config (Gemma's layer types, soft-caps, local
    // RoPE base and scaling included).
    void presetsRoundTrip_data()
    {
        QTest::addColumn<QString>("preset");
        for (const std::string &name : randomModelPresetNames())
            QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
    void presetsRoundTrip()
    {
        QFETCH(QString, preset);
        const ModelConfig c = randomModelPreset(preset.toStdString()).config;
        c.validate("preset");
        const ModelConfig d = ModelConfig::fromHfJsonText(c.toHfJson(), "b");
        QVERIFY2(c == d, c.toHfJson().c_str());
    }

    // The presets of real geometries have the published models' parameter counts (model cards and
    // the safetensors headers of Llama 3.2 1B / 3B, Llama 3.1 8B, Qwen2.5 3B, Qwen3 0.6B).
    void realGeometries_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<qint64>("parameters");
        QTest::newRow("llama3.2-1b") << "llama3.2-1b" << qint64(1235814400);
        QTest::newRow("llama3.2-3b") << "llama3.2-3b" << qint64(3212749824);
        QTest::newRow("llama3.1-8b") << "llama3.1-8b" << qint64(8030261248);
        QTest::newRow("qwen2.5-3b") << "qwen2.5-3b" << qint64(3085938688);
        QTest::newRow("qwen3-0.6b") << "qwen3-0.6b" << qint64(596049920);
    }
    void realGeometries()
    {
        QFETCH(QString, preset);
        QFETCH(qint64, parameters);
        const RandomModelSpec s = randomModelPreset(preset.toStdString());
        QVERIFY(s.streamed);
        QCOMPARE(qint64(s.config.parameterCount()), parameters);
    }

    void llama2cSerialisesAsLlama()
    {
        ModelConfig c = ModelConfig::fromHfJsonText(tiny(""), "t");
        c.modelType = "llama2c";
        c.architecture = "Llama2c";
        c.ropeLayout = RopeLayout::Interleaved;
        const ModelConfig d = ModelConfig::fromHfJsonText(c.toHfJson(), "t");
        QCOMPARE(d.modelType, std::string("llama"));
        QCOMPARE(d.architecture, std::string("LlamaForCausalLM"));
        QCOMPARE(d.hiddenSize, c.hiddenSize);
    }

    void errors_data()
    {
        QTest::addColumn<QString>("json");
        QTest::addColumn<ErrorCode>("code");
        QTest::addColumn<QString>("phrase");
        const auto row = [](const char *name, const std::string &json, ErrorCode code, const char *phrase) {
            QTest::newRow(name) << QString::fromStdString(json) << code << QString(phrase);
        };
        row("not json", "{\"model_type\": ", ErrorCode::Format, "not valid JSON");
        row("not object", "[1]", ErrorCode::Format, "not a JSON object");
        row("missing hidden_size",
            R"({"model_type": "llama", "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "vocab_size": 100, "max_position_embeddings": 256})",
            ErrorCode::Config, "field 'hidden_size' is missing");
        row("missing model_type", R"({"hidden_size": 64})", ErrorCode::Config,
            "field 'model_type' is missing");
        row("wrong type", tiny(R"("num_key_value_heads": "2")"), ErrorCode::Config,
            "field 'num_key_value_heads'");
        row("float for int", tiny(R"("head_dim": 16.5)"), ErrorCode::Config, "field 'head_dim'");
        row("bool wrong type", tiny(R"("tie_word_embeddings": "yes")"), ErrorCode::Config,
            "field 'tie_word_embeddings'");
        row("eos wrong type", tiny(R"("eos_token_id": "</s>")"), ErrorCode::Config, "field 'eos_token_id'");
        row("unsupported model_type", R"({"model_type": "gpt2", "hidden_size": 64})", ErrorCode::Unsupported,
            "model_type 'gpt2'");
        row("unsupported model_type names the list", R"({"model_type": "gemma", "hidden_size": 64})",
            ErrorCode::Unsupported, "phi3, gemma2, gemma3_text)");
        row("gemma3 multimodal",
            R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                "text_config": {"hidden_size": 2560, "model_type": "gemma3_text"}})",
            ErrorCode::Unsupported, "field 'text_config'");
        for (const char *value : {"0", "-16"}) {
            std::string phi3 = kPhi3Mini4k;
            const std::string from = "\"original_max_position_embeddings\": 4096";
            phi3.replace(phi3.find(from), from.size(),
                         std::string("\"original_max_position_embeddings\": ") + value);
            QTest::newRow(("phi3 original context " + std::string(value)).c_str())
                << QString::fromStdString(phi3) << ErrorCode::Config
                << QString("field 'original_max_position_embeddings' must be positive, got %1").arg(value);
        }
        const std::string g2 = kGemma2_2b;
        const auto gemma2With = [&](const char *from, const char *to) {
            std::string t = g2;
            t.replace(t.find(from), std::string(from).size(), to);
            return t;
        };
        row("gemma2 exact gelu",
            gemma2With("\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"hidden_activation\": \"gelu\""),
            ErrorCode::Unsupported, "field 'hidden_activation' is 'gelu'");
        row("gemma2 layer type", gemma2With("\"sliding_window\": 4096", R"("sliding_window": 4096,
            "layer_types": ["chunked_attention", "full_attention", "sliding_attention", "full_attention",
            "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
            "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
            "sliding_attention", "full_attention"])"),
            ErrorCode::Unsupported, "field 'layer_types' entry 0 is \"chunked_attention\"");
        row("gemma2 layer_types length",
            gemma2With("\"sliding_window\": 4096",
                       R"("sliding_window": 4096, "layer_types": ["full_attention"])"),
            ErrorCode::Config, "field 'layer_types' must be a list of num_hidden_layers (26) strings");
        row("gemma2 null window", gemma2With("\"sliding_window\": 4096", "\"sliding_window\": null"),
            ErrorCode::Config, "field 'sliding_window' is null");
        row("gemma2 zero window", gemma2With("\"sliding_window\": 4096", "\"sliding_window\": 0"),
            ErrorCode::Config, "field 'sliding_window' must be positive");
        row("gemma2 negative softcap",
            gemma2With("\"final_logit_softcapping\": 30.0", "\"final_logit_softcapping\": -1"),
            ErrorCode::Config, "field 'final_logit_softcapping' is -1; kvwb accepts (0, 10000]");
        // Floats: finite and inside the documented ranges (docs/model-formats.md, "Float fields").
        row("huge rope_theta", tiny(R"("rope_theta": 1e300)"), ErrorCode::Config,
            "field 'rope_theta' is 1e+300; kvwb accepts [1, 1000000000]");
        row("rope_theta below 1", tiny(R"("rope_theta": 0.5)"), ErrorCode::Config,
            "field 'rope_theta' is 0.5");
        row("large rms_norm_eps", tiny(R"("rms_norm_eps": 0.5)"), ErrorCode::Config,
            "field 'rms_norm_eps' is 0.5; kvwb accepts (0, 0.1]");
        row("huge softcap",
            gemma2With("\"final_logit_softcapping\": 30.0", "\"final_logit_softcapping\": 1e308"),
            ErrorCode::Config, "field 'final_logit_softcapping' is 1e+308");
        row("gemma3 bidirectional",
            std::string(kGemma3_1b).insert(1, "\"use_bidirectional_attention\": true, "),
            ErrorCode::Unsupported, "field 'use_bidirectional_attention'");
        row("gemma3 scaled local rope",
            std::string(kGemma3_4bText)
                .replace(std::string(kGemma3_4bText).find("{\"rope_type\": \"default\""), 23,
                         "{\"rope_type\": \"linear\", \"factor\": 2.0"),
            ErrorCode::Unsupported, "field 'rope_parameters.sliding_attention' has rope type 'linear'");
        row("rope per layer type outside gemma3",
            tiny(R"("rope_parameters": {"full_attention": {"rope_type": "default"}})"),
            ErrorCode::Unsupported, "keyed by layer type");
        row("unsupported architecture", tiny(R"("architectures": ["LlamaForSequenceClassification"])"),
            ErrorCode::Unsupported, "LlamaForSequenceClassification");
        row("yarn", tiny(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})"), ErrorCode::Unsupported,
            "field 'rope_scaling.rope_type' is 'yarn'");
        row("dynamic", tiny(R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"), ErrorCode::Unsupported,
            "field 'rope_scaling.type' is 'dynamic'");
        row("longrope without factors",
            tiny(R"("rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4})"), ErrorCode::Config,
            "field 'rope_parameters.short_factor' is missing");
        row("longrope factors of the wrong length",
            tiny(R"("rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1]})"),
            ErrorCode::Config, "field 'rope_scaling.short_factor' has 2 entries");
        row("longrope factor not a number",
            tiny(R"("rope_scaling": {"type": "su", "short_factor": [1, "x"], "long_factor": [1, 1]})"),
            ErrorCode::Config, "field 'rope_scaling.short_factor' must be a list of finite numbers");
        row("llama3 missing field", tiny(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"),
            ErrorCode::Config, "field 'rope_scaling.low_freq_factor' is missing");
        row("heads not multiple of kv", tiny(R"("num_key_value_heads": 3)"), ErrorCode::Config,
            "'num_key_value_heads' (3)");
        row("odd head_dim", tiny(R"("head_dim": 15)"), ErrorCode::Config,
            "field 'head_dim' (15) must be even");
        row("zero layers",
            tiny(R"("num_hidden_layers": 0)").replace(tiny("").find("\"num_hidden_layers\": 2"), 24, ""),
            ErrorCode::Config, "field 'num_hidden_layers' must be positive");
    }
    void errors()
    {
        QFETCH(QString, json);
        QFETCH(ErrorCode, code);
        QFETCH(QString, phrase);
        const Error e =
            expectError([&] { ModelConfig::fromHfJsonText(json.toStdString(), "/m/config.json"); });
        const std::string msg = e.what();
        QVERIFY2(e.code() == code, msg.c_str());
        QVERIFY2(msg.rfind("/m/config.json: ", 0) == 0, msg.c_str());
        QVERIFY2(msg.find(phrase.toStdString()) != std::string::npos, msg.c_str());
        QVERIFY2(msg.find('\n') == std::string::npos, msg.c_str());
    }

    // The memory a forward will need at 32k positions, before loading: the KV cache at its own
    // element type, and one prefill chunk's activations (the engine attends in query blocks whose
    // scores stay within 64 MiB), not a [heads, 32k, 32k] score matrix (68.7 GB for Qwen3-0.6B).
    void memoryEstimateAtLongContexts()
    {
        QCOMPARE(kvwb::core::attentionQueryBlock(16, 8192), int64_t(128));
        QCOMPARE(kvwb::core::attentionQueryBlock(16, 16384), int64_t(64));
        QCOMPARE(kvwb::core::attentionQueryBlock(32, 32768), int64_t(16));
        QCOMPARE(kvwb::core::attentionQueryBlock(64, int64_t(1) << 20), int64_t(16));
        QCOMPARE(kvwb::core::attentionQueryBlock(1, 1), int64_t(128));
        const ModelConfig c = kvwb::core::randomModelPreset("qwen3-0.6b").config;
        QCOMPARE(c.numHeads, 16);
        const auto f32 = kvwb::core::estimateMemory(c, 4, 32768);
        QCOMPARE(f32.kvBytes, int64_t(2) * 28 * 8 * 128 * 4 * 32768);
        const auto bf16Kv = kvwb::core::estimateMemory(c, 4, 32768, 2);
        QCOMPARE(bf16Kv.kvBytes * 2, f32.kvBytes);
        // a bf16 cache is read widened one layer at a time: [32k, 8 x 128] keys and values in f32
        QCOMPARE(bf16Kv.activationBytes - f32.activationBytes, int64_t(2) * 32768 * 8 * 128 * 4);
        QVERIFY2(f32.activationBytes < int64_t(1) << 30, qPrintable(QString::number(f32.activationBytes)));
        // linear in the context past the chunk (the widened keys, scores and mask grow with it)
        const auto half = kvwb::core::estimateMemory(c, 4, 16384);
        QVERIFY(double(f32.activationBytes) / double(half.activationBytes) < 2.1);
        // a short prompt is one chunk of its own length
        const auto small = kvwb::core::estimateMemory(c, 4, 100);
        QVERIFY(small.activationBytes < 16 << 20);
        const auto chunked = kvwb::core::estimateMemory(c, 4, 32768, 0, 512);
        QVERIFY(chunked.activationBytes < f32.activationBytes);
    }

    void missingFile()
    {
        const Error e = expectError([] { ModelConfig::fromHfJsonFile("/nonexistent/kvwb/config.json"); });
        QCOMPARE(e.code(), ErrorCode::Io);
        QVERIFY(std::string(e.what()).find("/nonexistent/kvwb/config.json") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(TestModelConfig)
#include "tst_model_config.moc"
