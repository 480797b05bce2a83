// Sentence embedders on tiny random weights the test writes itself: the BERT-family encoder's
// hidden states and its pooled sentence embeddings (mean, cls, max, last; padded batches) against a
// naive double-precision reference forward; the same weights as a GGUF file of llama.cpp's bert
// layout; "bert."-prefixed names; the files' faults as one line each; and the decoder embedder's
// last-token state against the reference decoder's logits.
#include "core/model/checkpoint.h"
#include "core/model/encoder_config.h"
#include "core/model/gguf.h"
#include "core/model/random_model.h"
#include "core/tokenize/tokenizer.h"
#include "core/tokenize/wordpiece_tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "gpu/model/encoder.h"
#include "gpu/model/model.h"
#include "tests/support/expect_error.h"
#include "tests/support/reference_encoder.h"
#include "tests/support/reference_forward.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

core::EncoderConfig tinyConfig()
{
    core::EncoderConfig c;
    c.vocabSize = 40;
    c.hiddenSize = 16;
    c.numLayers = 2;
    c.numHeads = 4;
    c.intermediateSize = 24;
    c.maxPositions = 32;
    c.typeVocabSize = 2;
    c.layerNormEps = 1e-12;
    return c;
}

std::vector<int> randomIds(int n, int vocab, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<int> ids(static_cast<size_t>(n));
    for (int &id : ids)
        id = int(rng() % uint64_t(vocab));
    return ids;
}

gpu::LoadOptions oneThread()
{
    gpu::LoadOptions o;
    o.threads = 1;
    return o;
}

std::vector<float> flat(const std::vector<std::vector<double>> &m)
{
    std::vector<float> out;
    for (const auto &row : m)
        out.insert(out.end(), row.begin(), row.end());
    return out;
}

// The same weights under llama.cpp's names in a GGUF file (F32), with its bert metadata.
void writeBertGguf(const fs::path &file, const core::EncoderConfig &c,
                   const std::map<std::string, std::vector<float>> &w, uint32_t poolingType)
{
    core::GgufWriter g;
    g.setString("general.architecture", "bert");
    g.setU32("bert.context_length", uint32_t(c.maxPositions));
    g.setU32("bert.embedding_length", uint32_t(c.hiddenSize));
    g.setU32("bert.feed_forward_length", uint32_t(c.intermediateSize));
    g.setU32("bert.block_count", uint32_t(c.numLayers));
    g.setU32("bert.attention.head_count", uint32_t(c.numHeads));
    g.setF32("bert.attention.layer_norm_epsilon", float(c.layerNormEps));
    g.setU32("bert.pooling_type", poolingType);
    const std::map<std::string, std::string> top = {
        {"embeddings.word_embeddings.weight", "token_embd.weight"},
        {"embeddings.position_embeddings.weight", "position_embd.weight"},
        {"embeddings.token_type_embeddings.weight", "token_types.weight"},
        {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
        {"embeddings.LayerNorm.bias", "token_embd_norm.bias"}};
    const std::vector<std::pair<std::string, std::string>> layer = {
        {"attention.self.query", "attn_q"},
        {"attention.self.key", "attn_k"},
        {"attention.self.value", "attn_v"},
        {"attention.output.dense", "attn_output"},
        {"attention.output.LayerNorm", "attn_output_norm"},
        {"intermediate.dense", "ffn_up"},
        {"output.dense", "ffn_down"},
        {"output.LayerNorm", "layer_output_norm"}};
    for (const auto &[name, shape] : core::EncoderCheckpoint::requiredTensors(c)) {
        std::string gname;
        if (auto it = top.find(name); it != top.end()) {
            gname = it->second;
        } else {
            const size_t dot = name.find('.', 14); // after "encoder.layer."
            const std::string index = name.substr(14, dot - 14), rest = name.substr(dot + 1);
            const std::string base = rest.substr(0, rest.rfind('.')),
                              suffix = rest.substr(rest.rfind('.') + 1);
            for (const auto &[hf, gg] : layer)
                if (hf == base)
                    gname = "blk." + index + "." + gg + "." + suffix;
        }
        QVERIFY2(!gname.empty(), name.c_str());
        const auto &v = w.at(name);
        std::vector<std::byte> bytes(v.size() * sizeof(float));
        std::memcpy(bytes.data(), v.data(), bytes.size());
        g.addTensor(gname, core::DType::F32, shape, std::move(bytes));
    }
    g.write(file);
}

} // namespace

class TestEncoder : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void hiddenStatesMatchReference_data();
    void hiddenStatesMatchReference();
    void poolingMatchesReference_data();
    void poolingMatchesReference();
    void ggufMatchesHf();
    void prefixedNamesLoad();
    void badFiles_data();
    void badFiles();
    void decoderLastToken();
    void embedderTokenizesPrefixesAndTruncates();
    void nonFiniteEmbedderRefused();
};

void TestEncoder::hiddenStatesMatchReference_data()
{
    QTest::addColumn<QString>("activation");
    QTest::addColumn<int>("tokens");
    QTest::newRow("gelu, 1 token") << "gelu" << 1;
    QTest::newRow("gelu, 13 tokens") << "gelu" << 13;
    QTest::newRow("gelu_new") << "gelu_new" << 9;
    QTest::newRow("relu, every position") << "relu" << 32;
}

void TestEncoder::hiddenStatesMatchReference()
{
    QFETCH(QString, activation);
    QFETCH(int, tokens);
    QTemporaryDir tmp;
    core::EncoderConfig c = tinyConfig();
    c.activation = activation == "gelu"       ? core::EncoderActivation::Gelu
                   : activation == "gelu_new" ? core::EncoderActivation::GeluTanh
                                              : core::EncoderActivation::Relu;
    const fs::path dir = fs::path(tmp.path().toStdString()) / "enc";
    core::writeEncoderHf(dir, c, test::randomEncoderWeights(c, 5));
    const auto ck = core::EncoderCheckpoint::open(dir);
    QCOMPARE(int(ck.config().activation), int(c.activation));
    const auto enc = gpu::Encoder::load(ck, oneThread());
    const auto ids = randomIds(tokens, c.vocabSize, 17);
    const double err = test::maxRelativeError(enc->hiddenStates(ids), flat(test::referenceEncoder(ck, ids)));
    QVERIFY2(err < 1e-4, qPrintable(QString::number(err)));
}

void TestEncoder::poolingMatchesReference_data()
{
    QTest::addColumn<QString>("pooling");
    QTest::addColumn<bool>("normalizeModule");
    for (const char *p : {"mean", "cls", "max", "last"})
        QTest::newRow(p) << p << (std::string(p) != "max");
}

void TestEncoder::poolingMatchesReference()
{
    QFETCH(QString, pooling);
    QFETCH(bool, normalizeModule);
    QTemporaryDir tmp;
    core::EncoderConfig c = tinyConfig();
    c.pooling = *core::parsePooling(pooling.toStdString());
    c.normalize = normalizeModule;
    const fs::path dir = fs::path(tmp.path().toStdString()) / "enc";
    core::writeEncoderHf(dir, c, test::randomEncoderWeights(c, 9));
    const auto ck = core::EncoderCheckpoint::open(dir);
    QCOMPARE(ck.config().pooling, c.pooling); // read back from 1_Pooling/config.json
    QCOMPARE(ck.config().normalize, normalizeModule);
    QCOMPARE(ck.config().poolingSource, std::string("modules.json"));
    const auto enc = gpu::Encoder::load(ck, oneThread());
    // one padded batch of three lengths: padding must not change any sequence's embedding
    const std::vector<std::vector<int>> batch = {randomIds(3, c.vocabSize, 1), randomIds(11, c.vocabSize, 2),
                                                 randomIds(7, c.vocabSize, 3)};
    const auto got = enc->embed(batch, true);
    QCOMPARE(got.size(), batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
        const double err = test::maxRelativeError(got[i], test::referenceSentenceEmbedding(ck, batch[i]));
        QVERIFY2(err < 1e-4, qPrintable(QString("sequence %1: %2").arg(i).arg(err)));
        const auto alone = enc->embed({batch[i]}, true)[0];
        QVERIFY(test::maxRelativeError(alone, got[i]) < 1e-5);
    }
}

void TestEncoder::ggufMatchesHf()
{
    QTemporaryDir tmp;
    core::EncoderConfig c = tinyConfig();
    c.pooling = core::Pooling::Cls;
    const auto w = test::randomEncoderWeights(c, 21);
    const fs::path root(tmp.path().toStdString());
    core::writeEncoderHf(root / "hf", c, w);
    writeBertGguf(root / "enc.gguf", c, w, 2); // llama.cpp's pooling type 2: CLS
    QVERIFY(core::isEncoderModel(root / "enc.gguf"));
    QVERIFY(core::isEncoderModel(root / "hf"));
    const auto g = core::EncoderCheckpoint::open(root / "enc.gguf");
    QVERIFY(g.isGguf());
    QCOMPARE(g.config().pooling, core::Pooling::Cls);
    QCOMPARE(g.config().vocabSize, c.vocabSize);
    QCOMPARE(g.config().numLayers, c.numLayers);
    const auto a = gpu::Encoder::load(core::EncoderCheckpoint::open(root / "hf"), oneThread());
    const auto b = gpu::Encoder::load(g, oneThread());
    const auto ids = randomIds(12, c.vocabSize, 4);
    QCOMPARE(b->hiddenStates(ids), a->hiddenStates(ids));
    QCOMPARE(b->embed({ids}, true), a->embed({ids}, true));
}

void TestEncoder::prefixedNamesLoad()
{
    // BertForMaskedLM and friends store the encoder under "bert."
    QTemporaryDir tmp;
    const core::EncoderConfig c = tinyConfig();
    const fs::path dir = fs::path(tmp.path().toStdString()) / "enc";
    const auto weights = test::randomEncoderWeights(c, 3);
    core::writeEncoderHf(dir, c, weights);
    core::SafetensorsWriter w;
    for (const auto &[name, shape] : core::EncoderCheckpoint::requiredTensors(c))
        w.addF32("bert." + name, shape, weights.at(name));
    w.addF32("cls.predictions.bias", {c.vocabSize}, std::vector<float>(size_t(c.vocabSize), 0.0f));
    const fs::path prefixed = fs::path(tmp.path().toStdString()) / "prefixed";
    fs::copy(dir, prefixed, fs::copy_options::recursive);
    w.write(prefixed / "model.safetensors");
    const auto ids = randomIds(6, c.vocabSize, 8);
    const auto a = gpu::Encoder::load(core::EncoderCheckpoint::open(dir), oneThread());
    const auto b = gpu::Encoder::load(core::EncoderCheckpoint::open(prefixed), oneThread());
    QCOMPARE(b->hiddenStates(ids), a->hiddenStates(ids));
}

void TestEncoder::badFiles_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("content");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("message");
    QTest::newRow("a decoder") << "config.json"
                               << R"({"model_type": "llama", "hidden_size": 16})"
                               << int(core::ErrorCode::Config) << "field 'model_type' is not bert";
    QTest::newRow("heads")
        << "config.json"
        << R"({"model_type": "bert", "vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2,
                                 "num_attention_heads": 5, "intermediate_size": 24, "max_position_embeddings": 32})"
        << int(core::ErrorCode::Config) << "field 'num_attention_heads' (5) does not divide hidden_size (16)";
    QTest::newRow("relative positions")
        << "config.json"
        << R"({"model_type": "bert", "vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 24, "position_embedding_type": "relative_key"})"
        << int(core::ErrorCode::Config) << "field 'position_embedding_type' is 'relative_key'";
    QTest::newRow("huge layers") << "config.json"
                                 << R"({"model_type": "bert", "vocab_size": 40, "hidden_size": 16,
                                       "num_hidden_layers": 99999999, "num_attention_heads": 4, "intermediate_size": 24})"
                                 << int(core::ErrorCode::Config) << "field 'num_hidden_layers' is 99999999";
    QTest::newRow("a Dense module")
        << "modules.json"
        << R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
              {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])"
        << int(core::ErrorCode::Config)
        << "modules.json: module 2: module type 'sentence_transformers.models.Dense'";
    QTest::newRow("two pooling modes")
        << "1_Pooling/config.json"
        << R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})"
        << int(core::ErrorCode::Config) << "2 pooling modes set";
    QTest::newRow("pooling dimension")
        << "1_Pooling/config.json"
        << R"({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": true})"
        << int(core::ErrorCode::Config)
        << "field 'word_embedding_dimension' is 64; the encoder's hidden size is";
    QTest::newRow("pooling dimension -1")
        << "1_Pooling/config.json"
        << R"({"word_embedding_dimension": -1, "pooling_mode_mean_tokens": true})"
        << int(core::ErrorCode::Config) << "field 'word_embedding_dimension' is -1";
    QTest::newRow("pooling dimension as text")
        << "1_Pooling/config.json"
        << R"({"word_embedding_dimension": "128", "pooling_mode_mean_tokens": true})"
        << int(core::ErrorCode::Config) << "field 'word_embedding_dimension' is \"128\"";
    QTest::newRow("two Pooling modules")
        << "modules.json"
        << R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
              {"idx": 2, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])"
        << int(core::ErrorCode::Config) << "module 2: a second Pooling module";
    QTest::newRow("pad token outside the vocabulary")
        << "config.json"
        << R"({"model_type": "bert", "vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 24, "pad_token_id": 99999})"
        << int(core::ErrorCode::Config) << "field 'pad_token_id' is 99999, outside the vocabulary of 40";
    QTest::newRow("path outside")
        << "modules.json"
        << R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                                        {"idx": 1, "path": "../x", "type": "sentence_transformers.models.Pooling"}])"
        << int(core::ErrorCode::Config) << "module 1: field 'path' '../x' leaves the model";
    // One token per sentence: every question embeds like every other that starts the same way.
    QTest::newRow("max_seq_length 1") << "sentence_bert_config.json"
                                      << R"({"max_seq_length": 1})" << int(core::ErrorCode::Config)
                                      << "field 'max_seq_length' is 1; kvwb needs at least 8 tokens";
}

void TestEncoder::badFiles()
{
    QFETCH(QString, file);
    QFETCH(QString, content);
    QFETCH(int, code);
    QFETCH(QString, message);
    QTemporaryDir tmp;
    const core::EncoderConfig c = tinyConfig();
    const fs::path dir = fs::path(tmp.path().toStdString()) / "enc";
    core::writeEncoderHf(dir, c, test::randomEncoderWeights(c, 3));
    core::writeFileAtomic(dir / file.toStdString(), content.toStdString());
    const auto e = test::expectError([&] { (void)core::EncoderCheckpoint::open(dir); });
    QCOMPARE(int(e.code()), code);
    QVERIFY2(QString::fromStdString(e.what()).contains(message), e.what());
}

void TestEncoder::decoderLastToken()
{
    // The decoder embedder's state at the last token, put through B's output head, must give the
    // reference forward's logits there: the state is the final-normed residual of that token.
    QTemporaryDir tmp;
    core::RandomModelSpec spec = core::randomModelPreset("qwen3");
    spec.seed = 4;
    const fs::path dir = fs::path(tmp.path().toStdString()) / "dec";
    core::writeRandomHfModel(dir, spec);
    const auto ck = core::Checkpoint::open(dir);
    const auto model = gpu::Model::load(ck, oneThread());
    const auto ids = randomIds(9, 258, 6);
    const auto state = model->lastHiddenState(ids);
    const auto &cfg = ck.config();
    QCOMPARE(int(state.size()), cfg.hiddenSize);
    const auto head = core::toFloatVector(
        ck.require(cfg.tieWordEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight", {}));
    std::vector<float> logits(size_t(cfg.vocabSize), 0.0f);
    for (int v = 0; v < cfg.vocabSize; ++v)
        for (int i = 0; i < cfg.hiddenSize; ++i)
            logits[size_t(v)] += head[size_t(v) * cfg.hiddenSize + i] * state[size_t(i)];
    const auto ref = test::referenceForward(ck, ids).back();
    const double err = test::maxRelativeError(logits, ref);
    QVERIFY2(err < 1e-3, qPrintable(QString::number(err)));

    // and the embedder: unit length, EOS appended, the same text the same vector
    gpu::DecoderEmbedder e(dir, oneThread());
    const auto v = e.embed("gradient descent");
    double n = 0;
    for (float x : v)
        n += double(x) * x;
    QVERIFY(std::abs(n - 1.0) < 1e-5);
    QCOMPARE(e.embed("gradient descent"), v);
    QVERIFY(e.embed("a different question") != v);
    QVERIFY(QString::fromStdString(e.name()).startsWith("decoder-last-dec-"));
}

void TestEncoder::embedderTokenizesPrefixesAndTruncates()
{
    // An encoder directory with its own vocab.txt: the embedder is the encoder over the WordPiece
    // ids; a prefix is the same as writing it before the text, and names the embedder apart; a
    // text longer than max_seq_length keeps its start and ends in [SEP].
    QTemporaryDir tmp;
    const fs::path dir = fs::path(tmp.path().toStdString()) / "enc";
    const auto tokens = core::buildWordPieceVocab({"query: hello world, what is a cat"}, 200);
    core::EncoderConfig c = tinyConfig();
    c.vocabSize = int(tokens.size());
    c.maxSeqLength = 8;
    c.normalize = true;
    core::writeEncoderHf(dir, c, test::randomEncoderWeights(c, 12));
    core::writeWordPieceVocab(dir, tokens);
    QVERIFY(core::isEncoderModel(dir));
    gpu::EncoderEmbedder plain(dir, oneThread()), prefixed(dir, oneThread(), "query: ");
    QCOMPARE(plain.name(), std::string("encoder-enc-16"));
    QVERIFY(prefixed.name() != plain.name() && prefixed.name().rfind("encoder-enc-16-p", 0) == 0);
    QCOMPARE(prefixed.embed("hello world"), plain.embed("query: hello world"));
    const auto ids = plain.tokenizer().encode("hello world", true);
    QCOMPARE(ids.size(), size_t(4)); // whole words: [CLS] hello world [SEP]
    const auto direct = plain.encoder().embed({ids}, true)[0];
    QVERIFY(test::maxRelativeError(plain.embed("hello world"), direct) < 1e-5);
    // 8 positions: [CLS] + 6 tokens + [SEP]
    const std::string longText = "hello world what is a cat hello world what is a cat";
    auto longIds = plain.tokenizer().encode(longText, true);
    QVERIFY(longIds.size() > 8);
    const int sep = longIds.back();
    longIds.resize(8);
    longIds.back() = sep;
    QVERIFY(test::maxRelativeError(plain.embed(longText), plain.encoder().embed({longIds}, true)[0]) < 1e-5);
}

// An encoder with a NaN LayerNorm weight (or NaN rows of its word embeddings) would make every
// similarity NaN: refused when it loads as an embedder, naming the model.
void TestEncoder::nonFiniteEmbedderRefused()
{
    QTemporaryDir tmp;
    const auto tokens = core::buildWordPieceVocab({"is it safe to drink water a day or not"}, 200);
    for (const std::string broken : {"embeddings.LayerNorm.weight", "embeddings.word_embeddings.weight"}) {
        const fs::path dir = fs::path(tmp.path().toStdString()) / ("enc-" + std::to_string(broken.size()));
        core::EncoderConfig c = tinyConfig();
        c.vocabSize = int(tokens.size());
        auto weights = test::randomEncoderWeights(c, 5);
        QVERIFY(weights.count(broken));
        auto &w = weights[broken];
        for (size_t i = 0; i < w.size(); i += 2) // every other value: rows of the embedding table too
            w[i] = std::nanf("");
        core::writeEncoderHf(dir, c, weights);
        core::writeWordPieceVocab(dir, tokens);
        const auto e = test::expectError([&] { gpu::EncoderEmbedder(dir, oneThread()); });
        QCOMPARE(int(e.code()), int(core::ErrorCode::Config));
        QVERIFY2(QString::fromStdString(e.what()).contains("non-finite values (NaN or Inf) for a probe"),
                 e.what());
        QVERIFY2(QString::fromStdString(e.what()).contains(QString::fromStdString(dir.string())), e.what());
    }
}

QTEST_GUILESS_MAIN(TestEncoder)
#include "tst_encoder.moc"
