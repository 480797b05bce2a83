// The headless kvwb commands end to end: output formats later checks rely on, determinism, and a
// one-line error with a non-zero exit code (never a crash or hang) for every kind of bad input.
#include "core/model/random_model.h"
#include "core/model/safetensors.h"
#include "core/tokenize/spm_library.h"
#include "core/tokenize/tokenizer.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

using Run = kvwb::test::KvwbRun;
using kvwb::test::runKvwb;
using kvwb::test::runProgram;

// Every subcommand, in `kvwb --help` order (app/cli/subcommands.cpp).
QStringList allSubcommands()
{
    QStringList all = {"info",        "upgrade",   "tokenize",       "generate",       "bench",
                       "make-model",  "convert",   "train",          "train-embedder", "train-verifier",
                       "eval-qa",     "capture",   "bench-capture",  "bench-tiers",    "align",
                       "sweep",       "compare",   "bench-transfer", "replay",         "sweep-semantic",
                       "bench-store", "summarise", "prices"};
    if (!kvwb::test::headlessBuild())
        all << "report";
    all << "knowledge"
        << "corpus"
        << "archive"
        << "workload";
    return all;
}

// What the dynamic loader would map for an executable, every library transitively (ldd).
QByteArray loadedLibraries(const fs::path &exe)
{
    QProcess p;
    p.start("ldd", {QString::fromStdString(exe.string())});
    if (!p.waitForFinished(30000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        return {};
    return p.readAllStandardOutput();
}

QString path(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

} // namespace

class TestCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_model;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        m_model = fs::path(m_tmp.path().toStdString()) / "tiny";
        const Run r = runKvwb({"make-model", "--preset", "gqa", "--out", path(m_model), "--seed", "5"});
        QCOMPARE(r.exitCode, 0);
    }

    // Through the front end: its own subcommands and those it forwards to kvwb-engine.
    void helpForEverySubcommand_data()
    {
        QTest::addColumn<QString>("cmd");
        for (const QString &c : allSubcommands())
            QTest::newRow(qPrintable(c)) << c;
    }
    void helpForEverySubcommand()
    {
        QFETCH(QString, cmd);
        const Run r = runKvwb({cmd, "--help"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("Usage:"));
    }

    // The front end's --help lists every subcommand, those it forwards too, in one table with the
    // engine's: kvwb-engine --help prints the same.
    void helpListsEverySubcommand()
    {
        const Run r = runKvwb({"--help"});
        QCOMPARE(r.exitCode, 0);
        QStringList listed;
        for (const QByteArray &line : r.out.split('\n'))
            if (line.startsWith("  ") && line.size() > 2 && line[2] != ' ')
                listed << QString::fromUtf8(line.mid(2).split(' ').first());
        QCOMPARE(listed, allSubcommands());
        const Run e = runProgram(test::kvwbEngineBinary(), {"--help"});
        QCOMPARE(e.exitCode, 0);
        QCOMPARE(e.out, r.out);
        const Run v = runKvwb({"--version"}), ev = runProgram(test::kvwbEngineBinary(), {"--version"});
        QCOMPARE(v.exitCode, 0);
        QVERIFY(v.out.startsWith("kvwb "));
        QCOMPARE(ev.out, v.out);
    }

    // `kvwb` is the light front end: neither it nor anything it loads is LibTorch or Qt Widgets,
    // Gui or Charts. kvwb-engine's list names LibTorch, so the check can fail.
    void frontEndLoadsNoEngine()
    {
        const QByteArray front = loadedLibraries(test::kvwbBinary());
        const QByteArray engine = loadedLibraries(test::kvwbEngineBinary());
        QVERIFY2(front.contains("libQt6Core.so"), front.constData()); // ldd answered
        QVERIFY2(engine.contains("libtorch"), engine.constData());
        QVERIFY2(engine.contains("libc10.so"), engine.constData());
        for (const char *lib :
             {"libtorch", "libc10", "libQt6Gui", "libQt6Widgets", "libQt6Charts", "libkvwb_spm"})
            QVERIFY2(!front.contains(lib), qPrintable(QString("kvwb loads %1:\n%2").arg(lib, front)));
        // The headless programs: the engine loads LibTorch but no Qt Gui, Widgets or Charts.
        if (test::headlessBuild())
            for (const char *lib : {"libQt6Gui", "libQt6Widgets", "libQt6Charts", "libQt6OpenGL"})
                QVERIFY2(!engine.contains(lib),
                         qPrintable(QString("headless kvwb-engine loads %1:\n%2").arg(lib, engine)));
    }

    // A subcommand that needs the engine runs in kvwb-engine, exec'd by the front end with the
    // arguments unchanged: the same result as kvwb-engine run directly, and its errors and exit codes.
    void forwardsToTheEngine()
    {
        const QStringList args = {"generate",     "--model", path(m_model),  "--prompt-ids", "1,2,3",
                                  "--max-tokens", "4",       "--ignore-eos", "--json"};
        const Run front = runKvwb(args), direct = runProgram(test::kvwbEngineBinary(), args);
        QCOMPARE(front.exitCode, 0);
        QCOMPARE(direct.exitCode, 0);
        const auto jf = QJsonDocument::fromJson(front.out).object();
        QCOMPARE(jf["output_ids"].toArray().size(), 4);
        QCOMPARE(jf["output_ids"], QJsonDocument::fromJson(direct.out).object()["output_ids"]);
        const Run bad = runKvwb({"generate", "--model", path(m_model)});
        QCOMPARE(bad.exitCode, 2);
        QVERIFY2(bad.err.startsWith("kvwb generate: give exactly one of --prompt or --prompt-ids"),
                 bad.err.constData());
        const Run unknown = runKvwb({"no-such-command"});
        QCOMPARE(unknown.exitCode, 2);
        QVERIFY(unknown.err.contains("unknown subcommand 'no-such-command'"));
    }

    // A copy of kvwb alone (no kvwb-engine beside it, none in ../lib/kvwb/) still runs its own
    // subcommands, and for the others says in one line which paths it tried.
    void frontEndWithoutEngine()
    {
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "bin";
        fs::create_directories(bin);
        fs::copy_file(test::kvwbBinary(), bin / "kvwb");
        fs::permissions(bin / "kvwb", fs::perms::owner_all, fs::perm_options::add);
        const Run tok = runProgram(bin / "kvwb", {"tokenize", "--tokenizer", path(m_model), "--text", "Hi!"});
        QCOMPARE(tok.exitCode, 0);
        QCOMPARE(tok.out.trimmed(), QByteArray("72 105 33"));
        const Run gen = runProgram(bin / "kvwb", {"generate", "--model", path(m_model), "--prompt-ids", "1"});
        QCOMPARE(gen.exitCode, 1);
        const QString err = QString::fromUtf8(gen.err).trimmed();
        QCOMPARE(err.count('\n'), 0);
        QVERIFY2(err.contains(path(bin / "kvwb-engine")), qPrintable(err));
        QVERIFY2(err.contains(path(bin.parent_path() / "lib" / "kvwb" / "kvwb-engine")), qPrintable(err));
    }

    void infoCard()
    {
        const Run r = runKvwb({"info", path(m_model)});
        QCOMPARE(r.exitCode, 0);
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["layers"].toInt(), 3);
        QCOMPARE(j["heads"].toInt(), 4);
        QCOMPARE(j["kv_heads"].toInt(), 2);
        QCOMPARE(j["head_dim"].toInt(), 16);
        QCOMPARE(j["vocab"].toInt(), 300);
        QCOMPARE(j["rope"].toObject()["layout"].toString(), QString("rotate_half"));
        QCOMPARE(j["tokenizer"].toObject()["kind"].toString(), QString("bpe"));
        QCOMPARE(j["fingerprint"].toString().size(), 64);
        QVERIFY(j["parameters"].toInteger() > 0);
    }

    void tokenizeRoundTrip()
    {
        const Run r = runKvwb({"tokenize", "--tokenizer", path(m_model), "--text", "Hi!", "--add-special"});
        QCOMPARE(r.exitCode, 0);
        QCOMPARE(r.out.trimmed(), QByteArray("256 72 105 33")); // BOS, then bytes
        const Run j =
            runKvwb({"tokenize", "--tokenizer", path(m_model / "tokenizer.json"), "--text", "a b", "--json"});
        QCOMPARE(j.exitCode, 0);
        const auto o = QJsonDocument::fromJson(j.out).object();
        QCOMPARE(o["ids"].toArray().size(), 3);
        QCOMPARE(o["pieces"].toArray()[1].toString(), QString::fromUtf8("\u0120")); // 'Ġ' = space
    }

    // SentencePiece runs in the front end and inside the torch-linked kvwb-engine (its protobuf
    // must not clash with LibTorch's), and kvwb's ids equal those of the library's own processor.
    void sentencePieceInsideKvwb_data()
    {
        QTest::addColumn<bool>("engine");
        QTest::newRow("kvwb") << false;
        QTest::newRow("kvwb-engine") << true;
    }
    void sentencePieceInsideKvwb()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        std::string corpus;
        for (int i = 0; i < 300; ++i)
            corpus += "the cache saves prefill number " + std::to_string(i) + " for every tenant\n";
        test::writeFile(dir / "corpus.txt", corpus);
        core::trainSentencePiece("--input=" + (dir / "corpus.txt").string() + " --model_prefix=" +
                                 (dir / "sp").string() + " --vocab_size=80 --model_type=bpe --minloglevel=2");
        QFETCH(bool, engine);
        const QStringList args = {"tokenize", "--tokenizer",     path(dir / "sp.model"),
                                  "--text",   "the cache saves", "--add-special",
                                  "--json"};
        const Run r = engine ? runProgram(test::kvwbEngineBinary(), args) : runKvwb(args);
        QCOMPARE(r.exitCode, 0);
        const auto o = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(o["kind"].toString(), QString("sentencepiece"));
        const auto tok = core::loadTokenizer(dir / "sp.model"); // the library's ids, in this process
        const auto expected = tok->encode("the cache saves", true);
        QCOMPARE(expected.front(), 1); // BOS
        QCOMPARE(o["ids"].toArray().size(), qsizetype(expected.size()));
        for (size_t i = 0; i < expected.size(); ++i)
            QCOMPARE(o["ids"].toArray()[qsizetype(i)].toInt(), expected[i]);
    }

    void generateJsonIsDeterministic()
    {
        const QStringList args = {"generate",     "--model", path(m_model),  "--prompt", "hello",
                                  "--max-tokens", "8",       "--ignore-eos", "--json"};
        const Run a = runKvwb(args), b = runKvwb(args);
        QCOMPARE(a.exitCode, 0);
        const auto ja = QJsonDocument::fromJson(a.out).object(), jb = QJsonDocument::fromJson(b.out).object();
        for (const char *k : {"prompt_ids", "output_ids", "text", "ttft_ms", "prefill_tok_s", "decode_tok_s"})
            QVERIFY2(ja.contains(k), k);
        QCOMPARE(ja["output_ids"].toArray().size(), 8);
        QVERIFY(ja["ttft_ms"].toDouble() > 0);
        QVERIFY(ja["prefill_tok_s"].toDouble() > 0);
        QVERIFY(ja["decode_tok_s"].toDouble() > 0);
        QCOMPARE(ja["stop_reason"].toString(), QString("max_tokens"));
        QCOMPARE(ja["output_ids"], jb["output_ids"]);
        QCOMPARE(ja["prompt_ids"].toArray().first().toInt(), 256); // BOS added
        // the same prompt as ids gives the same continuation
        QStringList ids;
        for (const auto v : ja["prompt_ids"].toArray())
            ids << QString::number(v.toInt());
        const Run c = runKvwb({"generate", "--model", path(m_model), "--prompt-ids", ids.join(","),
                               "--max-tokens", "8", "--ignore-eos", "--json"});
        QCOMPARE(QJsonDocument::fromJson(c.out).object()["output_ids"], ja["output_ids"]);
    }

    // GGUF end to end: written by make-model and by convert, read by info, tokenize and generate
    // with the same results as the HF directory; back to HF; bad input is one line.
    void ggufFiles()
    {
        const fs::path dir = fs::path(m_tmp.path().toStdString()) / "gguf";
        fs::create_directories(dir);
        const Run conv =
            runKvwb({"convert", "--model", path(m_model), "--to", "gguf", "--out", path(dir / "m.gguf")});
        QCOMPARE(conv.exitCode, 0);
        const Run made = runKvwb({"make-model", "--preset", "gqa", "--seed", "5", "--format", "gguf",
                                  "--weight-dtype", "Q8_0", "--out", path(dir / "q8.gguf")});
        QVERIFY2(made.exitCode == 0, made.err.constData());
        const Run info = runKvwb({"info", path(dir / "q8.gguf")});
        QCOMPARE(info.exitCode, 0);
        const auto card = QJsonDocument::fromJson(info.out).object();
        QCOMPARE(card["format"].toString(), QString("gguf"));
        QCOMPARE(card["gguf"].toObject()["architecture"].toString(), QString("llama"));
        QVERIFY(card["gguf"].toObject()["tensor_types"].toObject().contains("Q8_0"));
        QVERIFY(card["gguf"].toObject()["dequantised_f32_bytes"].toDouble() > card["bytes"].toDouble());
        QCOMPARE(card["tokenizer"].toObject()["kind"].toString(), QString("bpe"));
        const QStringList gen = {"generate", "--prompt",     "hello", "--max-tokens",
                                 "8",        "--ignore-eos", "--json"};
        const Run a = runKvwb(QStringList{gen} << "--model" << path(m_model));
        const Run b = runKvwb(QStringList{gen} << "--model" << path(dir / "m.gguf"));
        QCOMPARE(b.exitCode, 0);
        const auto ja = QJsonDocument::fromJson(a.out).object(), jb = QJsonDocument::fromJson(b.out).object();
        QCOMPARE(jb["prompt_ids"], ja["prompt_ids"]);
        QCOMPARE(jb["output_ids"], ja["output_ids"]);
        QCOMPARE(jb["logprobs"], ja["logprobs"]);
        const Run back = runKvwb({"convert", "--model", path(dir / "m.gguf"), "--out", path(dir / "back")});
        QCOMPARE(back.exitCode, 0);
        const Run c = runKvwb(QStringList{gen} << "--model" << path(dir / "back"));
        QCOMPARE(QJsonDocument::fromJson(c.out).object()["output_ids"], ja["output_ids"]);
        // refusals
        const Run exists =
            runKvwb({"convert", "--model", path(m_model), "--to", "gguf", "--out", path(dir / "m.gguf")});
        QCOMPARE(exists.exitCode, 1);
        QVERIFY2(exists.err.contains("m.gguf (--out): exists; pass --force to replace it"),
                 exists.err.constData());
        const Run badType = runKvwb({"convert", "--model", path(m_model), "--to", "gguf", "--weight-type",
                                     "Q3_K", "--out", path(dir / "x.gguf")});
        QCOMPARE(badType.exitCode, 2);
        QVERIFY(badType.err.contains("Q3_K"));
        QFile f(path(dir / "m.gguf"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray head = f.read(200);
        QFile cut(path(dir / "cut.gguf"));
        QVERIFY(cut.open(QIODevice::WriteOnly));
        cut.write(head);
        cut.close();
        const Run bad = runKvwb({"info", path(dir / "cut.gguf")});
        QCOMPARE(bad.exitCode, 1);
        QCOMPARE(bad.err.count('\n'), 1);
        QVERIFY2(bad.err.contains("cut.gguf"), bad.err.constData());
    }

    // A LongRoPE model serves its original context by default (info says so) and refuses a longer
    // prompt in one line naming the way out; --context above it loads the long factors, which
    // continue the same prompt differently from the short ones.
    void longRopeContext()
    {
        const fs::path dir = fs::path(m_tmp.path().toStdString()) / "longrope";
        QCOMPARE(
            runKvwb({"make-model", "--preset", "phi3-longrope", "--seed", "5", "--out", path(dir)}).exitCode,
            0);
        const auto rope =
            QJsonDocument::fromJson(runKvwb({"info", path(dir)}).out).object()["rope"].toObject();
        QCOMPARE(rope["scaling"].toString(), QString("longrope"));
        QCOMPARE(rope["default_context"].toInt(), 16);
        const QStringList gen = {"generate", "--model",      path(dir), "--max-tokens",
                                 "4",        "--ignore-eos", "--json"};
        const Run refused = runKvwb(QStringList{gen} << "--prompt"
                                                     << "a prompt of 20 bytes");
        QCOMPARE(refused.exitCode, 1);
        QCOMPARE(refused.err.count('\n'), 1);
        QVERIFY2(refused.err.contains("larger context"), refused.err.constData());
        const QStringList shortPrompt = QStringList{gen} << "--prompt"
                                                         << "hi";
        const Run s = runKvwb(shortPrompt), l = runKvwb(QStringList{shortPrompt} << "--context"
                                                                                 << "64");
        QCOMPARE(s.exitCode, 0);
        QCOMPARE(l.exitCode, 0);
        const auto js = QJsonDocument::fromJson(s.out).object(), jl = QJsonDocument::fromJson(l.out).object();
        QCOMPARE(jl["prompt_ids"], js["prompt_ids"]);
        QVERIFY(jl["logprobs"] != js["logprobs"]);
        QCOMPARE(runKvwb(QStringList{gen} << "--prompt"
                                          << "a prompt of 20 bytes"
                                          << "--context"
                                          << "64")
                     .exitCode,
                 0);
        const Run over = runKvwb(QStringList{shortPrompt} << "--context"
                                                          << "257");
        QCOMPARE(over.exitCode, 1);
        QVERIFY2(over.err.contains("max_position_embeddings"), over.err.constData());
    }

    void bench()
    {
        const Run r =
            runKvwb({"bench", path(m_model), "--lengths", "16,64", "--decode-tokens", "4", "--repeats", "1"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("prefill tok/s"));
        QVERIFY(r.out.contains("|            16 |"));
        QVERIFY(QRegularExpression(R"(peak resident memory \(VmHWM\): [1-9][0-9]*\.[0-9] MB)")
                    .match(QString::fromUtf8(r.out))
                    .hasMatch());
    }

    // Each bad input: non-zero exit, no crash, one line on stderr naming the culprit.
    void badInput_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("expect"); // substring of the error line
        QTest::newRow("missing path") << "missing"
                                      << "does-not-exist";
        QTest::newRow("truncated safetensors") << "truncated"
                                               << "model.safetensors";
        QTest::newRow("header not json") << "notjson"
                                         << "model.safetensors";
        QTest::newRow("config missing field") << "nofield"
                                              << "hidden_size";
        QTest::newRow("unsupported architecture") << "arch"
                                                  << "gpt_neox";
        QTest::newRow("misshapen tensor") << "shape"
                                          << "model.layers.1.self_attn.k_proj.weight";
        QTest::newRow("tokenizer too big for vocab") << "vocab"
                                                     << "tokenizer";
        QTest::newRow("bad flag value") << "flag"
                                        << "--max-tokens";
        QTest::newRow("cuda without gpu") << "cuda"
                                          << "CUDA";
    }
    void badInput()
    {
        QFETCH(QString, kind);
        QFETCH(QString, expect);
        QTemporaryDir tmp;
        const fs::path dir = fs::path(tmp.path().toStdString()) / "m";
        fs::copy(m_model, dir, fs::copy_options::recursive);
        QStringList args = {"generate", "--model", path(dir), "--prompt-ids", "1,2,3", "--max-tokens", "2"};
        if (kind == "missing") {
            args[2] = path(dir / "does-not-exist");
        } else if (kind == "truncated") {
            fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
        } else if (kind == "notjson") {
            std::string bytes = test::readFile(dir / "model.safetensors");
            bytes[8] = '#';
            test::writeFile(dir / "model.safetensors", bytes);
        } else if (kind == "nofield" || kind == "arch") {
            std::string cfg = test::readFile(dir / "config.json");
            if (kind == "nofield")
                cfg.replace(cfg.find("\"hidden_size\""), 13, "\"hidden_sizeX\"");
            else
                cfg.replace(cfg.find("\"model_type\": \"llama\""), 21, "\"model_type\": \"gpt_neox\"");
            test::writeFile(dir / "config.json", cfg);
        } else if (kind == "shape") {
            // rewrite the weights with one misshapen tensor
            const auto ws = core::WeightSet::open(dir);
            core::SafetensorsWriter w;
            for (const auto &name : ws.names()) {
                auto ref = ws.get(name);
                auto shape = ref.info->shape;
                if (name == "model.layers.1.self_attn.k_proj.weight")
                    shape = {shape[1], shape[0]};
                w.add(name, ref.info->dtype, shape, {ref.data, size_t(ref.info->bytes)});
            }
            w.write(dir / "model2.safetensors");
            fs::rename(dir / "model2.safetensors", dir / "model.safetensors");
        } else if (kind == "vocab") {
            // an added token with id 350 in a 300-token model
            std::string tok = test::readFile(dir / "tokenizer.json");
            const std::string key = "\"added_tokens\": [";
            tok.insert(tok.find(key) + key.size(),
                       "{\"id\": 350, \"content\": \"<extra>\", \"single_word\": false, \"lstrip\": false, "
                       "\"rstrip\": false, \"normalized\": false, \"special\": true},");
            test::writeFile(dir / "tokenizer.json", tok);
            args = QStringList{"generate", "--model", path(dir), "--prompt", "hi", "--max-tokens", "2"};
        } else if (kind == "flag") {
            args[6] = "-3";
        } else if (kind == "cuda") {
            args << "--device"
                 << "cuda";
        }
        const Run r = runKvwb(args);
        if (kind == "cuda" && r.exitCode == 0)
            QSKIP("a CUDA device is present");
        QCOMPARE(r.status, QProcess::NormalExit);
        QVERIFY2(r.exitCode != 0, r.out.constData());
        const QString err = QString::fromUtf8(r.err).trimmed();
        QCOMPARE(err.count('\n'), 0); // one line
        QVERIFY2(err.contains(expect), qPrintable(err));
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
