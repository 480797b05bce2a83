// Hostile input against the kvwb executable: every case builds its bad input from code, runs kvwb
// under setrlimit (2 GiB of address space, 30 s of CPU) and expects a clean refusal - exit 1 (a
// kvwb error) or 2 (bad usage), one line on stderr naming the culprit, no crash, no hang - and
// that nothing the user did not name is read or overwritten.
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"
#include "tests/support/wordnet_fixture.h"

#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <hdf5.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <sys/stat.h>

using namespace kvwb;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kAddressSpace = int64_t(2) << 30;
constexpr int kCpuSeconds = 30;

QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

// Runs kvwb bounded and checks the refusal: the exit code, one stderr line, and that it names
// `culprit`.
void expectRefusal(const QStringList &args, int exitCode, const QString &culprit)
{
    const auto r = test::runKvwbLimited(args, kAddressSpace, kCpuSeconds);
    const QString err = QString::fromUtf8(r.err).trimmed();
    QVERIFY2(r.status == QProcess::NormalExit,
             qPrintable("crashed or killed: " + args.join(' ') + "\n" + err));
    QVERIFY2(
        r.exitCode == exitCode,
        qPrintable(
            QString("exit %1, expected %2: %3\n%4").arg(r.exitCode).arg(exitCode).arg(args.join(' '), err)));
    QVERIFY2(!err.contains('\n'), qPrintable("more than one line:\n" + err));
    QVERIFY2(err.contains(culprit), qPrintable("does not name '" + culprit + "': " + err));
}

// args with the placeholder "OUT" replaced by path, and --force when asked for.
QStringList withOutput(QStringList args, const fs::path &path, bool force)
{
    args.replaceInStrings(QRegularExpression("^OUT$"), q(path));
    if (force)
        args << "--force";
    return args;
}

json readJson(const fs::path &p)
{
    return json::parse(test::readFile(p));
}

void writeJson(const fs::path &p, const json &j)
{
    test::writeFile(p, j.dump());
}

// `depth` nested Sequence wrappers of kind (normalizers / pretokenizers / decoders) around leaf.
std::string nestedSequence(const char *listField, int depth, const std::string &leaf)
{
    std::string s;
    s.reserve(size_t(depth) * 40 + leaf.size());
    for (int i = 0; i < depth; ++i)
        s += std::string("{\"type\":\"Sequence\",\"") + listField + "\":[";
    s += leaf;
    for (int i = 0; i < depth; ++i)
        s += "]}";
    return s;
}

} // namespace

class TestHostileInput : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_root, m_model, m_experiment;

    // A fresh copy of the tiny model to damage.
    fs::path copyModel(const std::string &name)
    {
        const fs::path dir = m_root / name;
        fs::remove_all(dir);
        fs::copy(m_model, dir, fs::copy_options::recursive);
        return dir;
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        m_root = fs::path(m_tmp.path().toStdString());
        // without a session's runtime folder Qt prints a notice on stderr (the report's charts)
        const fs::path runtime = m_root / "runtime";
        fs::create_directories(runtime);
        fs::permissions(runtime, fs::perms::owner_all);
        qputenv("XDG_RUNTIME_DIR", QByteArray::fromStdString(runtime.string()));
        m_model = m_root / "tiny";
        const auto r = test::runKvwb({"make-model", "--preset", "tiny", "--out", q(m_model)});
        QCOMPARE(r.exitCode, 0);
    }

    // An experiment with prompts, a converter and a ledger, made by kvwb itself (once).
    fs::path experiment()
    {
        if (!m_experiment.empty())
            return m_experiment;
        const fs::path prompts = m_root / "prompts.txt";
        test::writeFile(prompts,
                        "the cat sat on the mat\nhello world\na dog ran\nthe sun is hot\none two three\n"
                        "red green blue\nup and down\nin the box\n");
        const fs::path exp = m_root / "exp.h5";
        auto r = test::runKvwb({"capture", "--model-a", q(m_model), "--model-b", q(m_model), "--prompts",
                                q(prompts), "--out", q(exp), "--threads", "1"});
        if (r.exitCode != 0)
            qFatal("capture failed: %s", r.err.constData());
        r = test::runKvwb({"align", "--experiment", q(exp), "--threads", "1"});
        if (r.exitCode != 0)
            qFatal("align failed: %s", r.err.constData());
        m_experiment = exp;
        return exp;
    }

    // config.json counts are checked before anything is sized from them.
    void configCounts_data()
    {
        QTest::addColumn<QString>("field");
        QTest::addColumn<qint64>("value");
        QTest::newRow("layers") << "num_hidden_layers" << qint64(2147483647);
        QTest::newRow("heads") << "num_attention_heads" << qint64(1 << 20);
        QTest::newRow("vocab") << "vocab_size" << qint64(2000000000);
        QTest::newRow("hidden") << "hidden_size" << qint64(1 << 30);
        QTest::newRow("eos wraps") << "eos_token_id" << qint64(4294967532LL);
        QTest::newRow("eos outside vocab") << "eos_token_id" << qint64(99999);
        QTest::newRow("bos outside vocab") << "bos_token_id" << qint64(-3);
    }
    void configCounts()
    {
        QFETCH(QString, field);
        QFETCH(qint64, value);
        const fs::path dir = copyModel("config");
        json c = readJson(dir / "config.json");
        c[field.toStdString()] = value;
        writeJson(dir / "config.json", c);
        expectRefusal({"info", q(dir)}, 1, field);
        expectRefusal({"generate", "--model", q(dir), "--prompt", "hi"}, 1, field);
    }

    // Numeric options are range-checked, NaN included.
    void optionRanges_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("culprit");
        QTest::newRow("threads") << QStringList{"--threads", "100000"} << "--threads";
        QTest::newRow("temperature nan") << QStringList{"--temperature", "nan"} << "--temperature";
        QTest::newRow("temperature inf") << QStringList{"--temperature", "inf"} << "--temperature";
        QTest::newRow("top-p nan") << QStringList{"--top-p", "nan"} << "--top-p";
    }
    void optionRanges()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, culprit);
        expectRefusal(QStringList{"generate", "--model", q(m_model), "--prompt", "hi"} + args, 2, culprit);
    }

    void replayBlock()
    {
        const fs::path w = m_root / "w.jsonl";
        test::writeFile(
            w,
            R"({"id":1,"t_ms":0,"tenant":"t","user":"u","intent":"","model":"a","prompt":"hi","max_tokens":2})"
            "\n");
        expectRefusal({"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers", "prefix", "--block",
                       "2147483647"},
                      2, "--block");
    }

    // Outputs are checked before the work, not after it.
    void unwritableOutputFirst()
    {
        const fs::path w = m_root / "w2.jsonl";
        test::writeFile(
            w,
            R"({"id":1,"t_ms":0,"tenant":"t","user":"u","intent":"","model":"a","prompt":"hi","max_tokens":2})"
            "\n");
        const fs::path out = m_root / "no-such-dir" / "ledger.csv";
        expectRefusal(
            {"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers", "exact", "--ledger", q(out)},
            1, "--ledger");
        const auto r = test::runKvwb(
            {"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers", "exact", "--ledger", q(out)});
        QVERIFY2(!r.err.contains("replayed"), r.err.constData()); // refused before any request ran
    }

    // A tenant holding the tiers' namespace separator is refused before the replay starts, naming
    // the request and the field.
    void replayTenantSeparator()
    {
        const fs::path w = m_root / "tenant.jsonl";
        test::writeFile(
            w,
            R"({"id":1,"t_ms":0,"tenant":"ok","user":"u","intent":"","model":"a","prompt":"hi","max_tokens":2})"
            "\n"
            R"({"id":7,"t_ms":1,"tenant":"a\u001fb","user":"u","intent":"","model":"a","prompt":"hi","max_tokens":2})"
            "\n");
        expectRefusal({"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers", "exact"}, 1,
                      "request 7");
        expectRefusal({"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers", "exact"}, 1,
                      "tenant");
    }

    // Nesting, expansion and size are bounded in the tokenizer, with the file named.
    void tokenizerNesting_data()
    {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("list");
        QTest::addColumn<QString>("leaf");
        QTest::newRow("normalizer") << "normalizer"
                                    << "normalizers"
                                    << R"({"type":"Lowercase"})";
        QTest::newRow("pre_tokenizer")
            << "pre_tokenizer"
            << "pretokenizers"
            << R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
        QTest::newRow("decoder") << "decoder"
                                 << "decoders"
                                 << R"({"type":"ByteLevel"})";
    }
    void tokenizerNesting()
    {
        QFETCH(QString, key);
        QFETCH(QString, list);
        QFETCH(QString, leaf);
        const fs::path dir = copyModel("nest");
        std::string text = test::readFile(dir / "tokenizer.json");
        json t = json::parse(text);
        t[key.toStdString()] = nullptr;
        text = t.dump();
        // a 30,000-deep Sequence (about 1 MB), spliced in as text: json values this deep are not built here
        const std::string marker = "\"" + key.toStdString() + "\":null";
        const size_t at = text.find(marker);
        QVERIFY(at != std::string::npos);
        text.replace(at, marker.size(),
                     "\"" + key.toStdString() +
                         "\":" + nestedSequence(list.toLatin1().constData(), 30000, leaf.toStdString()));
        test::writeFile(dir / "tokenizer.json", text);
        expectRefusal({"tokenize", "--tokenizer", q(dir / "tokenizer.json"), "--text", "hi"}, 1, "nests");
        expectRefusal({"tokenize", "--tokenizer", q(dir / "tokenizer.json"), "--text", "hi"}, 1,
                      "tokenizer.json");
    }

    void tokenizerExpansion()
    {
        const fs::path dir = copyModel("expand");
        json t = readJson(dir / "tokenizer.json");
        json chain = json::array();
        for (int i = 0; i < 8; ++i)
            chain.push_back(
                {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(16, 'a')}});
        t["normalizer"] = {{"type", "Sequence"}, {"normalizers", chain}};
        writeJson(dir / "tokenizer.json", t);
        expectRefusal({"tokenize", "--tokenizer", q(dir / "tokenizer.json"), "--text", QString(1000, 'a')}, 1,
                      "expand");
    }

    // A pattern that backtracks past PCRE2's match limit on the text: refused naming the file and
    // the pattern's place in it, not an internal error.
    void tokenizerRegexLimit()
    {
        const fs::path dir = copyModel("regex");
        json t = readJson(dir / "tokenizer.json");
        t["pre_tokenizer"] = {{"type", "Split"},
                              {"pattern", {{"Regex", "(a|a?)+$"}}},
                              {"behavior", "Isolated"},
                              {"invert", false}};
        writeJson(dir / "tokenizer.json", t);
        const QString text = QString(200, 'a') + "b";
        expectRefusal({"tokenize", "--tokenizer", q(dir / "tokenizer.json"), "--text", text}, 1,
                      "tokenizer.json");
        expectRefusal({"tokenize", "--tokenizer", q(dir / "tokenizer.json"), "--text", text}, 1,
                      "pre_tokenizer");
    }

    // A shape whose byte size passes 2^64 is reported as such, not as "needs 0 bytes".
    void safetensorsShapeOverflow()
    {
        const fs::path dir = copyModel("overflow");
        const std::string header = R"({"model.norm.weight":{"dtype":"F32","shape":[4611686018427387904],)"
                                   R"("data_offsets":[0,0]}})";
        std::string file(8, '\0');
        const uint64_t n = header.size();
        std::memcpy(file.data(), &n, 8);
        test::writeFile(dir / "model.safetensors", file + header);
        expectRefusal({"info", q(dir)}, 1, "more than 2^64 bytes");
    }

    // Non-finite weights in an f32 model: the message says so, not "try --dtype f32".
    void nanWeightsInF32()
    {
        const fs::path dir = copyModel("nan");
        std::string st = test::readFile(dir / "model.safetensors");
        uint64_t headerLen = 0;
        std::memcpy(&headerLen, st.data(), 8);
        const json header = json::parse(st.substr(8, headerLen));
        const json &norm = header.at("model.norm.weight");
        QCOMPARE(norm.at("dtype").get<std::string>(), std::string("F32"));
        const uint64_t begin = 8 + headerLen + norm.at("data_offsets")[0].get<uint64_t>();
        const uint64_t end = 8 + headerLen + norm.at("data_offsets")[1].get<uint64_t>();
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (uint64_t at = begin; at + 4 <= end; at += 4)
            std::memcpy(st.data() + at, &nan, 4);
        test::writeFile(dir / "model.safetensors", st);
        const QStringList args{"generate",     "--model", q(dir),      "--prompt", "hi",
                               "--max-tokens", "2",       "--threads", "1"};
        expectRefusal(args, 1, "NaN");
        const auto r = test::runKvwbLimited(args, kAddressSpace, kCpuSeconds);
        QVERIFY2(!r.err.contains("--dtype f32"), r.err.constData());
    }

    void hugeText()
    {
        const fs::path f = m_root / "huge.txt";
        test::writeFile(f, std::string(size_t(5) << 20, 'x'));
        expectRefusal({"tokenize", "--tokenizer", q(m_model / "tokenizer.json"), "--text-file", q(f)}, 1,
                      "MiB");
        // inputs that never end are refused before a byte is read, not read until memory runs out
        expectRefusal({"tokenize", "--tokenizer", q(m_model / "tokenizer.json"), "--text-file", "/dev/zero"},
                      1, "/dev/zero: not a regular file");
        expectRefusal({"capture", "--model-a", q(m_model), "--model-b", q(m_model), "--prompts",
                       "/dev/urandom", "--out", q(m_root / "never.h5")},
                      1, "/dev/urandom: not a regular file");
        QVERIFY(!fs::exists(m_root / "never.h5"));
    }

    void postProcessorIds_data()
    {
        QTest::addColumn<qint64>("id");
        QTest::newRow("past the vocabulary") << qint64(99999);
        QTest::newRow("negative") << qint64(-1);
        QTest::newRow("wraps to a real id") << qint64(4294967296LL + 5);
    }
    void postProcessorIds()
    {
        QFETCH(qint64, id);
        const fs::path dir = copyModel("post");
        json t = readJson(dir / "tokenizer.json");
        t["post_processor"] = {
            {"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"special_tokens",
             {{"<x>", {{"id", "<x>"}, {"ids", json::array({id})}, {"tokens", json::array({"<x>"})}}}}}};
        writeJson(dir / "tokenizer.json", t);
        expectRefusal({"tokenize", "--tokenizer", q(dir / "tokenizer.json"), "--text", "hi", "--add-special"},
                      1, "post_processor");
    }

    // A model whose weights do not fit the memory available is refused before loading, with both
    // figures (the free-memory figure injected, so the test does not depend on the machine).
    void loadThatCannotFitIsRefused()
    {
        qputenv("KVWB_TEST_MEM_AVAILABLE", "1000");
        expectRefusal({"generate", "--model", q(m_model), "--prompt", "hi"}, 1,
                      "GB available (MemAvailable); --dtype bf16 halves them; not loaded");
        expectRefusal({"generate", "--model", q(m_model), "--prompt", "hi", "--dtype", "bf16"}, 1,
                      "its weights need about 0.00 GB in bf16");
        qputenv("KVWB_TEST_MEM_AVAILABLE", "100000000000");
        const auto r =
            test::runKvwb({"generate", "--model", q(m_model), "--prompt", "hi", "--max-tokens", "2"});
        qunsetenv("KVWB_TEST_MEM_AVAILABLE");
        QVERIFY2(r.exitCode == 0, r.err.constData());
    }

    // A job whose working set (one request's KV caches, their f32 copies and one prefill chunk's
    // activations) would not fit what the machine has left with the models loaded is refused
    // before it starts, naming both figures and what makes it smaller: capture, compare and
    // replay, with the free-memory figure injected (2 MB: the tiny model's 0.5 MB of weights
    // load; a 256-token prompt needs 3.44 MB per model: 0.26 MB of KV, its f32 copy, and 2.92 MB
    // of activations, 2 MB of them the [4 heads, 256, 256] scores and probabilities; a 16-token
    // one well under 1 MB).
    void jobThatCannotFitIsRefused()
    {
        const fs::path exp = experiment();
        std::string longText;
        for (int i = 0; i < 200; ++i)
            longText += "the cat sat on the mat ";
        const fs::path prompts = m_root / "long-prompts.txt";
        test::writeFile(prompts, longText + "\n");
        const fs::path w = m_root / "long.jsonl";
        test::writeFile(w, json{{"id", 1},
                                {"t_ms", 0},
                                {"tenant", "t"},
                                {"user", "u"},
                                {"intent", ""},
                                {"model", "a"},
                                {"prompt", longText},
                                {"max_tokens", 2}}
                                   .dump() +
                               "\n");
        const fs::path out = m_root / "long.h5";
        qputenv("KVWB_TEST_MEM_AVAILABLE", "2000000");
        expectRefusal({"capture", "--model-a", q(m_model), "--model-b", q(m_model), "--prompts", q(prompts),
                       "--out", q(out), "--threads", "1"},
                      1, "needs about 6.9 MB of working memory (the longest prompt's KV caches");
        QVERIFY(!fs::exists(out));
        // (compare skips a prompt that leaves no room for its answer in the 256 positions: 184 bytes)
        std::string shorter;
        for (int i = 0; i < 8; ++i)
            shorter += "the cat sat on the mat ";
        expectRefusal({"compare", "--experiment", q(exp), "--prompt", QString::fromStdString(shorter),
                       "--threads", "1"},
                      1, "comparing a prompt needs about");
        expectRefusal({"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers", "exact"}, 1,
                      "MB available (MemAvailable); not started (--max-tokens");
        // the remedy the message names: capped prompts fit
        const auto r =
            test::runKvwb({"capture", "--model-a", q(m_model), "--model-b", q(m_model), "--prompts",
                           q(prompts), "--out", q(out), "--threads", "1", "--max-tokens", "16"});
        qunsetenv("KVWB_TEST_MEM_AVAILABLE");
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("of working memory per prompt"), r.err.constData());
    }

    // make-model --tokenizer ships the given tokenizer.json (its end-of-text id into config.json)
    // and refuses one whose ids do not fit the preset's vocabulary.
    void makeModelTakesATokenizer()
    {
        json tok = readJson(m_model / "tokenizer.json");
        auto r = test::runKvwb({"make-model", "--preset", "gqa", "--tokenizer", q(m_model / "tokenizer.json"),
                                "--out", q(m_root / "with-tok")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(readJson(m_root / "with-tok" / "tokenizer.json"), tok);
        QCOMPARE(readJson(m_root / "with-tok" / "config.json")["eos_token_id"].get<int>(), 257);
        tok["added_tokens"].push_back({{"id", 5000},
                                       {"content", "<|far|>"},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", false},
                                       {"special", true}});
        writeJson(m_root / "far.json", tok);
        expectRefusal({"make-model", "--preset", "gqa", "--tokenizer", q(m_root / "far.json"), "--out",
                       q(m_root / "far-model")},
                      1, "far.json");
        QVERIFY(!fs::exists(m_root / "far-model"));
    }

    // The one output rule (core::claimOutputFile), run against every option that writes a file whole:
    // an existing regular file is replaced only with --force and is untouched without it; a FIFO is
    // never replaced, --force or not. OUT stands for the output path.
    void outputRuleForFiles_data()
    {
        QTest::addColumn<QStringList>("args");
        const fs::path wn = m_root / "wn";
        if (!fs::exists(wn))
            test::writeWordNetFixture(wn, 30, false);
        const fs::path w = m_root / "rule.jsonl";
        test::writeFile(
            w,
            R"({"id":1,"t_ms":0,"tenant":"t","user":"u","intent":"","model":"a","prompt":"hi","max_tokens":2})"
            "\n");
        const fs::path pairs = m_root / "pairs.tsv";
        test::writeFile(pairs, "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                               "0\t1\t2\tHow do I learn C++?\tWhat is the best way to learn C++?\t1\n");
        const QStringList wnDir{"--wordnet-dir", q(wn)};
        QTest::newRow("workload wordnet")
            << QStringList{"workload", "wordnet", "--requests", "5", "--out", "OUT"} + wnDir;
        QTest::newRow("workload multiturn")
            << QStringList{"workload", "multiturn", "--users", "1", "--rounds", "1", "--out", "OUT"} + wnDir;
        QTest::newRow("workload quora")
            << QStringList{"workload", "quora", "--input", q(pairs), "--out", "OUT"};
        QTest::newRow("corpus wordnet")
            << QStringList{"corpus", "wordnet", "--concepts", "5", "--out", "OUT"} + wnDir;
        QTest::newRow("knowledge profiles")
            << QStringList{"knowledge", "profiles", "--workload", q(w), "--out", "OUT"};
        QTest::newRow("knowledge corpus")
            << QStringList{"knowledge", "corpus", "--concepts", "5", "--out", "OUT"} + wnDir;
        QTest::newRow("knowledge build")
            << QStringList{"knowledge", "build", "--no-modules", "--concepts", "5", "--out", "OUT"} + wnDir;
        QTest::newRow("make-model gguf")
            << QStringList{"make-model", "--preset", "tiny", "--format", "gguf", "--out", "OUT"};
        QTest::newRow("convert gguf")
            << QStringList{"convert", "--model", q(m_model), "--to", "gguf", "--out", "OUT"};
        QTest::newRow("archive export") << QStringList{
            "archive", "export", q(test::sourceDir() / "projects" / "demo" / "demo.kvwb"), "--out", "OUT"};
        QTest::newRow("replay ledger")
            << QStringList{"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers",
                           "exact",  "--threads",  "1",  "--ledger",  "OUT"};
        QTest::newRow("replay outputs")
            << QStringList{"replay", "--workload", q(w), "--model-a", q(m_model), "--tiers",
                           "exact",  "--threads",  "1",  "--outputs", "OUT"};
        const fs::path conversations = m_root / "conversations.jsonl";
        if (!fs::exists(conversations))
            QCOMPARE(test::runKvwb({"workload", "multiturn", "--users", "1", "--rounds", "2", "--out",
                                    q(conversations), "--wordnet-dir", q(wn)})
                         .exitCode,
                     0);
        QTest::newRow("summarise") << QStringList{"summarise", "--workload", q(conversations),
                                                  "--model",   q(m_model),   "--threads",
                                                  "1",         "--out",      "OUT"};
    }
    void outputRuleForFiles()
    {
        if (test::headlessBuild()) // the same app/cli code: integration.hostile_input runs it
            QSKIP("run by integration.hostile_input");
        QFETCH(QStringList, args);
        const fs::path out = m_root / ("rule-" + std::string(QTest::currentDataTag()));
        const auto withOut = [&](const fs::path &path, bool force) { return withOutput(args, path, force); };
        fs::remove_all(out);
        test::writeFile(out, "a file the user made");
        expectRefusal(withOut(out, false), 1, "--force");
        QCOMPARE(test::readFile(out), std::string("a file the user made"));
        auto r = test::runKvwb(withOut(out, true));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(test::readFile(out) != "a file the user made");
        QVERIFY(!fs::exists(out.string() + ".tmp"));

        const fs::path fifo = m_root / ("fifo-" + std::string(QTest::currentDataTag()));
        fs::remove(fifo);
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        expectRefusal(withOut(fifo, true), 1, "is a FIFO");
        QVERIFY(fs::is_fifo(fifo));

        // the same check, shared by every option: two of them stand for the rest
        if (QString(QTest::currentDataTag()) == "workload wordnet" ||
            QString(QTest::currentDataTag()) == "replay ledger") {
            expectRefusal(withOut(m_root / "no-such-dir" / "x", false), 1, "no directory");
            expectRefusal(withOut("", false), 1, "an empty path");
        }
    }

    // Directory outputs: an empty or new one is written; one with files only with --force and only
    // when kvwb wrote it (it holds .kvwb-output); a directory kvwb wrote is replaced whole.
    void outputRuleForDirectories_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::newRow("make-model") << QStringList{"make-model", "--preset", "tiny", "--out", "OUT"};
        QTest::newRow("convert") << QStringList{"convert", "--model", q(m_model), "--out", "OUT"};
        if (!test::headlessBuild()) // the report is the window's (its charts)
            QTest::newRow("report") << QStringList{
                "report", "--experiment", q(experiment()), "--format", "md", "--out", "OUT"};
    }
    void outputRuleForDirectories()
    {
        if (test::headlessBuild()) // the same app/cli code: integration.hostile_input runs it
            QSKIP("run by integration.hostile_input");
        QFETCH(QStringList, args);
        const auto withOut = [&](const fs::path &path, bool force) { return withOutput(args, path, force); };
        const fs::path theirs = m_root / ("theirs-" + std::string(QTest::currentDataTag()));
        fs::remove_all(theirs);
        fs::create_directories(theirs);
        test::writeFile(theirs / "notes.txt", "the user's notes");
        expectRefusal(withOut(theirs, false), 1, "--force");
        expectRefusal(withOut(theirs, true), 1, ".kvwb-output");
        QCOMPARE(test::readFile(theirs / "notes.txt"), std::string("the user's notes"));
        expectRefusal(withOut(".", true), 1, ".kvwb-output");

        const fs::path ours = m_root / ("ours-" + std::string(QTest::currentDataTag()));
        fs::remove_all(ours);
        fs::create_directories(ours); // empty: used as is
        auto r = test::runKvwb(withOut(ours, false));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(fs::exists(ours / ".kvwb-output"));
        expectRefusal(withOut(ours, false), 1, "--force");
        test::writeFile(ours / "stale.txt", "of an earlier run");
        r = test::runKvwb(withOut(ours, true));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(!fs::exists(ours / "stale.txt")); // replaced whole
        QVERIFY(fs::exists(ours / ".kvwb-output"));
        QVERIFY(!fs::exists(m_root / ("ours-" + std::string(QTest::currentDataTag()) + ".kvwb-tmp")));
        QVERIFY(!fs::exists(m_root / ("ours-" + std::string(QTest::currentDataTag()) + ".kvwb-old")));

        const fs::path file = m_root / ("file-" + std::string(QTest::currentDataTag()));
        test::writeFile(file, "x");
        expectRefusal(withOut(file, true), 1, "not a directory");
        QCOMPARE(test::readFile(file), std::string("x"));
    }

    // A sharded index names files inside the model directory only.
    // Single bit flips anywhere in an experiment file: every command that opens it either works
    // or refuses in one line; none crashes or hangs (HDF5 1.10 crashed on a damaged global heap,
    // which kvwb/2 files no longer have, and hung for hours retrying a damaged metadata block
    // under SWMR).
    void experimentBitFlips()
    {
        const fs::path good = experiment();
        const std::string bytes = test::readFile(good);
        std::mt19937_64 rng(7);
        int refused = 0, runs = 0;
        for (int trial = 0; trial < 30; ++trial) {
            std::string damaged = bytes;
            const size_t at = size_t(rng() % damaged.size());
            damaged[at] = char(damaged[at] ^ (1 << (rng() % 8)));
            const fs::path path = m_root / "flip.h5";
            test::writeFile(path, damaged);
            std::vector<QStringList> commands{{"info", q(path)}};
            if (!test::headlessBuild()) // a headless build has no report writer
                commands.push_back({"report", "--experiment", q(path), "--out", q(m_root / "flip-report"),
                                    "--format", "json"});
            runs += int(commands.size());
            for (const QStringList &args : commands) {
                fs::remove_all(m_root / "flip-report");
                const auto r = test::runKvwbLimited(args, kAddressSpace, kCpuSeconds, 30000);
                QString err;
                for (const QString &line : QString::fromUtf8(r.err).split('\n', Qt::SkipEmptyParts))
                    if (!line.startsWith("QStandardPaths:")) // Qt's note on a bare environment
                        err += (err.isEmpty() ? "" : "\n") + line;
                const QString what = QString("byte %1: %2\n%3").arg(at).arg(args.join(' '), err);
                QVERIFY2(r.status == QProcess::NormalExit, qPrintable("crashed or hung at " + what));
                QVERIFY2(r.exitCode == 0 || r.exitCode == 1,
                         qPrintable("exit " + QString::number(r.exitCode) + " at " + what));
                if (r.exitCode == 1) {
                    ++refused;
                    QVERIFY2(!err.contains('\n') && err.contains(q(path)), qPrintable(what));
                }
            }
        }
        qInfo("%d of %d runs refused the damaged file, the rest read it", refused, runs);
    }

    // A flipped bit in stored KV is refused by align (which reads it), naming the dataset and
    // prompt; nothing is fitted from it.
    void experimentKvChecksum()
    {
        const fs::path path = m_root / "crc.h5";
        fs::copy_file(experiment(), path, fs::copy_options::overwrite_existing);
        {
            const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
            QVERIFY(f >= 0);
            const hid_t ds = H5Dopen2(f, "/kv/b/layer_001/keys", H5P_DEFAULT);
            QVERIFY(ds >= 0);
            const hsize_t origin[3] = {0, 0, 0};
            hsize_t size = 0;
            QVERIFY(H5Dget_chunk_storage_size(ds, origin, &size) >= 0 && size > 64);
            std::string chunk(size, '\0');
            uint32_t filters = 0;
            QVERIFY(H5Dread_chunk(ds, H5P_DEFAULT, origin, &filters, chunk.data()) >= 0);
            chunk[40] = char(chunk[40] ^ 1); // row 2 of prompt 0 for any head_dim >= 5 (f32)
            QVERIFY(H5Dwrite_chunk(ds, H5P_DEFAULT, filters, origin, size, chunk.data()) >= 0);
            H5Dclose(ds);
            H5Fclose(f);
        }
        expectRefusal({"align", "--experiment", q(path), "--threads", "1", "--name", "x"}, 1, "CRC-32");
        expectRefusal({"align", "--experiment", q(path), "--threads", "1", "--name", "x"}, 1,
                      "/kv/b/layer_001/keys");
    }

    void shardsStayInside_data()
    {
        QTest::addColumn<QString>("shard");
        QTest::newRow("parent") << "../outside/x.safetensors";
        QTest::newRow("absolute") << "/etc/passwd";
        QTest::newRow("device") << "/dev/zero";
        QTest::newRow("deep parent") << "../../../../etc/passwd";
        QTest::newRow("symlink out") << "link.safetensors";
    }
    void shardsStayInside()
    {
        QFETCH(QString, shard);
        const fs::path dir = copyModel("shards");
        fs::create_directories(m_root / "outside");
        fs::copy_file(dir / "model.safetensors", m_root / "outside" / "x.safetensors",
                      fs::copy_options::overwrite_existing);
        fs::create_symlink(m_root / "outside" / "x.safetensors", dir / "link.safetensors");
        // every tensor of the real file, mapped to the hostile shard
        json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
        const std::string st = test::readFile(dir / "model.safetensors");
        uint64_t headerLen = 0;
        std::memcpy(&headerLen, st.data(), 8);
        const json header = json::parse(st.substr(8, headerLen));
        for (const auto &[name, info] : header.items())
            if (name != "__metadata__")
                index["weight_map"][name] = shard.toStdString();
        fs::remove(dir / "model.safetensors");
        writeJson(dir / "model.safetensors.index.json", index);
        expectRefusal({"info", q(dir)}, 1, "outside the model directory");
    }
};

QTEST_GUILESS_MAIN(TestHostileInput)
#include "tst_hostile_input.moc"
