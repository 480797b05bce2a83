// Backend parity, checked the way llama.cpp's test-backend-ops checks a backend against the CPU:
// for each model family, the target device and compute type against the CPU in f32 on the same
// weights and tokens - the forward's logits, the KV cache read back (keys before RoPE, values), a
// transfer through identity converters (A's cache converted into B's, B continuing) and greedy
// decoding (teacher-forced top-1 agreement with the CPU's continuation) - each within a stated
// tolerance. The target is CUDA when this LibTorch sees a GPU (f32, bf16, f16); on a CPU-only
// machine, the CPU's own bf16, so the check and its table run in CI too. One table row per case
// on stdout; KVWB_PARITY_TABLE=FILE also writes the table as Markdown (tests/device/run.sh).
#include "core/model/checkpoint.h"
#include "core/model/random_model.h"
#include "gpu/model/device.h"
#include "gpu/model/model.h"
#include "gpu/transfer/transfer.h"
#include "tests/support/identity_map.h"
#include "tests/support/reference_forward.h"

#include <QTemporaryDir>
#include <QtTest>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

// Largest relative error (max |a - b| / max |b|) each compute type may show against the CPU's f32,
// on logits and on the cache; and the least top-1 agreement of its greedy continuation. f32 on
// another device differs by summation order only; bf16 keeps 8 mantissa bits and f16 11.
struct Tolerance
{
    double logits, kv, top1;
};
Tolerance toleranceOf(gpu::FloatType t)
{
    switch (t) {
    case gpu::FloatType::F32:
        return {1e-3, 1e-4, 0.95};
    case gpu::FloatType::BF16:
        return {4e-2, 3e-2, 0.8};
    case gpu::FloatType::F16:
        return {1e-2, 5e-3, 0.9};
    }
    return {0, 0, 1};
}

std::vector<int> idsOf(int n, int vocab, int salt)
{
    std::vector<int> ids;
    for (int i = 0; i < n; ++i)
        ids.push_back(int((uint64_t(i) * 2654435761u + uint64_t(salt) * 40503u) % uint64_t(vocab)));
    return ids;
}

double top1Agreement(const std::vector<float> &a, const std::vector<float> &b, int vocab)
{
    const size_t rows = a.size() / size_t(vocab);
    int same = 0;
    for (size_t r = 0; r < rows; ++r) {
        const auto ra = a.begin() + std::ptrdiff_t(r * size_t(vocab)),
                   rb = b.begin() + std::ptrdiff_t(r * size_t(vocab));
        same += std::max_element(ra, ra + vocab) - ra == std::max_element(rb, rb + vocab) - rb;
    }
    return rows ? double(same) / double(rows) : 1.0;
}

// Everything one (model, device, compute type) run produces that the table compares.
struct Outputs
{
    std::vector<float> logits;         // prompt + continuation, every position
    std::vector<float> keys, values;   // every layer's cache after the prompt, concatenated
    std::vector<float> transferLogits; // B from A's converted cache, teacher-forced
};

Outputs run(const core::Checkpoint &ck, gpu::LoadOptions o, const std::vector<int> &prompt,
            const std::vector<int> &continuation)
{
    Outputs out;
    auto m = gpu::Model::load(ck, o);
    std::vector<int> all = prompt;
    all.insert(all.end(), continuation.begin(), continuation.end());
    auto cache = m->newCache();
    out.logits = m->forward(all, cache, true);
    auto pc = m->newCache();
    m->forward(prompt, pc);
    for (int l = 0; l < pc.numLayers(); ++l) {
        const auto layer = pc.layer(l, gpu::KeyForm::PreRope);
        out.keys.insert(out.keys.end(), layer.keys.begin(), layer.keys.end());
        out.values.insert(out.values.end(), layer.values.begin(), layer.values.end());
    }
    // transfer: a second instance as A, its prompt cache converted into B's, B fed the continuation
    auto a = gpu::Model::load(ck, o);
    auto ac = a->newCache();
    a->forward(prompt, ac);
    const auto conv = gpu::Converter::create(test::identityConverter(ck.config()), *a, *m);
    auto bc = m->newCache();
    conv.convert(ac, bc);
    out.transferLogits = m->forward(continuation, bc, true);
    return out;
}

std::string gTable;

void row(const std::string &line)
{
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    gTable += line + "\n";
}

} // namespace

class TestParity : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        m_device = gpu::cudaAvailable() ? gpu::Device::Cuda : gpu::Device::Cpu;
        row(fmt::format("parity: {} against cpu f32 (torch {})", gpu::describeDevice(m_device),
                        gpu::torchVersion()));
        row("");
        row("| model | dtype | logits rel err | keys rel err | values rel err | transfer rel err | top-1 "
            "greedy | transfer top-1 | tolerance (logits / kv / top-1) |");
        row("|---|---|---|---|---|---|---|---|---|");
    }

    void parity_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<int>("dtype");
        const bool cuda = m_device == gpu::Device::Cuda;
        for (const char *p : {"gqa", "qwen3", "gemma3", "phi3-longrope", "135m"}) {
            if (!cuda && std::string_view(p) == "135m")
                continue; // 135M parameters: the GPU's row; on the CPU the small ones show the same
            for (gpu::FloatType t : {gpu::FloatType::F32, gpu::FloatType::BF16, gpu::FloatType::F16}) {
                if (!cuda && t != gpu::FloatType::BF16)
                    continue; // CPU-only: the CPU's bf16 against its f32; f16 is CUDA's
                QTest::newRow(fmt::format("{} {}", p, gpu::floatTypeName(t)).c_str()) << QString(p) << int(t);
            }
        }
    }

    void parity()
    {
        QFETCH(QString, preset);
        QFETCH(int, dtype);
        const auto type = gpu::FloatType(dtype);
        QTemporaryDir tmp;
        const fs::path dir = fs::path(tmp.path().toStdString()) / "m";
        auto spec = core::randomModelPreset(preset.toStdString());
        spec.seed = 3;
        core::writeRandomHfModel(dir, spec);
        const auto ck = core::Checkpoint::open(dir);
        const int vocab = ck.config().vocabSize;
        // LongRoPE: loaded for 64 positions, past its original 16, so its long factors act
        const int context = preset == "phi3-longrope" ? 64 : 0;
        const int n = std::min(48, (context ? context : ck.config().contextLimit()) - 16);
        const auto prompt = idsOf(n, vocab, 1), continuation = idsOf(16, vocab, 2);
        gpu::LoadOptions cpu;
        cpu.context = context;
        const Outputs ref = run(ck, cpu, prompt, continuation);
        gpu::LoadOptions target = cpu;
        target.device = m_device;
        target.dtype = type;
        const Outputs got = run(ck, target, prompt, continuation);
        // teacher-forced greedy: the continuation's positions only
        const auto tail = [&](const std::vector<float> &l) {
            return std::vector<float>(l.end() - std::ptrdiff_t(continuation.size() * size_t(vocab)), l.end());
        };
        const double eLogits = test::maxRelativeError(got.logits, ref.logits);
        const double eKeys = test::maxRelativeError(got.keys, ref.keys);
        const double eValues = test::maxRelativeError(got.values, ref.values);
        const double eTransfer = test::maxRelativeError(got.transferLogits, ref.transferLogits);
        const double top1 = top1Agreement(tail(got.logits), tail(ref.logits), vocab);
        const double top1Transfer = top1Agreement(got.transferLogits, ref.transferLogits, vocab);
        const Tolerance tol = toleranceOf(type);
        row(fmt::format(
            "| {} | {} | {:.2e} | {:.2e} | {:.2e} | {:.2e} | {:.3f} | {:.3f} | {:.0e} / {:.0e} / {} |",
            preset.toStdString(), gpu::floatTypeName(type), eLogits, eKeys, eValues, eTransfer, top1,
            top1Transfer, tol.logits, tol.kv, tol.top1));
        QVERIFY2(eLogits <= tol.logits, qPrintable(QString("logits %1").arg(eLogits)));
        QVERIFY2(eKeys <= tol.kv && eValues <= tol.kv,
                 qPrintable(QString("kv %1 / %2").arg(eKeys).arg(eValues)));
        QVERIFY2(eTransfer <= tol.logits, qPrintable(QString("transfer %1").arg(eTransfer)));
        QVERIFY2(top1 >= tol.top1 && top1Transfer >= tol.top1,
                 qPrintable(QString("top-1 %1 / %2").arg(top1).arg(top1Transfer)));
        // the CPU's f32 transfer through identity maps is the model's own continuation
        QVERIFY(test::maxRelativeError(ref.transferLogits, tail(ref.logits)) < 1e-4);
    }

    void cleanupTestCase()
    {
        if (const char *file = std::getenv("KVWB_PARITY_TABLE")) {
            std::ofstream f(file);
            f << gTable;
        }
    }

private:
    gpu::Device m_device = gpu::Device::Cpu;
};

QTEST_GUILESS_MAIN(TestParity)
#include "tst_parity.moc"
