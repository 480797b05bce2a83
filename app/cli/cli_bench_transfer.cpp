#include "app/cli/cli_bench_transfer.h"

#include "app/cli/cli_converter_options.h"
#include "app/cli/engine_options.h"
#include "app/jobs/compare_job.h"
#include "app/jobs/fit_job.h"
#include "app/jobs/handoff_job.h"
#include "core/metrics/bootstrap.h"
#include "core/metrics/gate_curve.h"
#include "core/metrics/text_metrics.h"
#include "core/model/random_model.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/workload.h"
#include "gpu/align/alignment.h"
#include "gpu/model/device.h"
#include "gpu/transfer/compare.h"
#include "gpu/transfer/transfer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include <unistd.h>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using core::Clock;
using core::msSince;
using nlohmann::json;

namespace {

// A converter of `family` from A to B with random maps (the work of a conversion does not depend
// on the values): B's every layer from kk of A's, head-matched or not, the maps' weights drawn from
// rng. UsageError when --rank exceeds a low-rank map's widths.
core::ConverterRecord randomConverter(const core::ModelConfig &ca, const core::ModelConfig &cb,
                                      core::ConverterFamily family, int kk, bool headMatched, int rank,
                                      int hidden, std::mt19937_64 &rng)
{
    core::ConverterRecord set;
    set.family = family;
    std::normal_distribution<float> N(0.0f, 0.05f);
    const auto randomPart = [&](std::vector<float> &v, size_t n) {
        v.resize(n);
        for (float &w : v)
            w = N(rng);
    };
    for (int l = 0; l < cb.numLayers; ++l) {
        core::LayerConverter m;
        m.targetLayer = l;
        m.sourceLayers = gpu::proportionalSourceLayers(l, cb.numLayers, ca.numLayers, kk);
        m.headMatched = headMatched;
        const int maps = headMatched ? cb.numKvHeads : 1;
        const int in = (headMatched ? ca.headDim : ca.numKvHeads * ca.headDim) * kk;
        const int out = headMatched ? cb.headDim : cb.numKvHeads * cb.headDim;
        for (int h = 0; h < 2 * maps; ++h) {
            core::KvMap lm;
            lm.inputDim = in;
            lm.outputDim = out;
            if (family == core::ConverterFamily::LowRank) {
                if (rank > std::min(in, out))
                    throw UsageError{
                        fmt::format("--rank {} exceeds the maps' widths ({} in, {} out)", rank, in, out)};
                lm.rank = rank;
                randomPart(lm.down, size_t(in) * size_t(rank));
                randomPart(lm.up, size_t(rank) * size_t(out));
            } else {
                randomPart(lm.weight, size_t(in) * size_t(out));
            }
            if (family == core::ConverterFamily::Mlp) {
                lm.hidden = hidden;
                randomPart(lm.hiddenWeight, size_t(in) * size_t(hidden));
                randomPart(lm.hiddenBias, size_t(hidden));
                randomPart(lm.outWeight, size_t(hidden) * size_t(out));
            }
            lm.bias.assign(size_t(out), 0.0f);
            (h < maps ? m.keys : m.values).push_back(std::move(lm));
        }
        set.layers.push_back(std::move(m));
    }
    return set;
}

// The median times of B's prefill of n random tokens, of converting A's cache of them into B's, and of
// A's prefill, over reps repetitions after one that warms up.
struct TransferTiming
{
    double prefillB = 0, convertMs = 0, prefillA = 0;
};

TransferTiming timeTransfer(const gpu::Model &a, const gpu::Model &b, const gpu::Converter &conv, int n,
                            int reps, std::mt19937_64 &rng)
{
    std::vector<int> ids;
    for (int i = 0; i < n; ++i)
        ids.push_back(3 + int(rng() % uint64_t(a.config().vocabSize - 3)));
    std::vector<double> prefB, convMs, prefA;
    for (int r = 0; r <= reps; ++r) { // rep 0 warms up
        auto cb1 = b.newCache();
        auto t0 = Clock::now();
        b.forward(ids, cb1);
        const double pb = msSince(t0);
        auto ca1 = a.newCache();
        t0 = Clock::now();
        a.forward(ids, ca1);
        const double pa = msSince(t0);
        auto cb2 = b.newCache();
        t0 = Clock::now();
        conv.convert(ca1, cb2);
        const double cm = msSince(t0);
        if (r == 0)
            continue;
        prefB.push_back(pb);
        prefA.push_back(pa);
        convMs.push_back(cm);
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    return {median(prefB), median(convMs), median(prefA)};
}

} // namespace

int cmdBenchTransfer(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"preset-a", "Random model preset for A (default demo-a).", "NAME", "demo-a"});
    p.addOption({"preset-b", "Random model preset for B (default demo-b).", "NAME", "demo-b"});
    p.addOption({"lengths", "Prompt lengths in tokens (default 128,512,2048).", "LIST", "128,512,2048"});
    p.addOption({"k", "Source layers per target layer (default 1).", "K", "1"});
    p.addOption({"per-head", "Head-matched maps."});
    p.addOption({"family", "Converter family: ridge (default), low-rank or mlp.", "NAME", "ridge"});
    p.addOption(
        {"rank", "low-rank: the rank of each map (default 32, at most the map's widths).", "R", "32"});
    p.addOption({"hidden", "mlp: the branch's width (default 256).", "N", "256"});
    p.addOption({"reps", "Repetitions per length; the median is reported (default 5).", "N", "5"});
    p.addOption({"json", "Print the rows as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Conversion vs prefill: time for B to prefill N tokens itself against converting A's cache of them "
          "(A's KV already cached) and against A's prefill + conversion. Random weights of the presets' "
          "geometry (the work does not depend on the values), context raised to fit the longest length.");
    const auto lengths = parseIdList(p.value("lengths"), "--lengths");
    const int k = intOption(p, "k", 1, 1), reps = intOption(p, "reps", 5, 1);
    const auto family = core::parseConverterFamily(str(p.value("family")));
    if (!family)
        throw UsageError{"--family expects ridge, low-rank or mlp, got '" + str(p.value("family")) + "'"};
    const int rank = intOption(p, "rank", 32, 1), hidden = intOption(p, "hidden", 256, 1);
    const auto lo = loadOptions(p);
    const fs::path dir = fs::temp_directory_path() / fmt::format("kvwb-bench-transfer-{}", ::getpid());
    fs::create_directories(dir);
    auto specA = core::randomModelPreset(str(p.value("preset-a")));
    auto specB = core::randomModelPreset(str(p.value("preset-b")));
    const int longest = *std::max_element(lengths.begin(), lengths.end());
    for (auto *s : {&specA, &specB})
        s->config.maxPositionEmbeddings = std::max(s->config.maxPositionEmbeddings, longest + 8);
    specB.config.vocabSize = specA.config.vocabSize;
    core::writeRandomHfModel(dir / "a", specA);
    core::writeRandomHfModel(dir / "b", specB);
    auto a = gpu::Model::load(dir / "a", lo);
    auto b = gpu::Model::load(dir / "b", lo);
    fs::remove_all(dir);
    const auto &ca = a->config(), &cb = b->config();
    const bool headMatched = p.isSet("per-head") && ca.numKvHeads == cb.numKvHeads;
    std::mt19937_64 rng(1);
    const int kk = std::min(k, ca.numLayers);
    const core::ConverterRecord set = randomConverter(ca, cb, *family, kk, headMatched, rank, hidden, rng);
    const auto conv = gpu::Converter::create(set, *a, *b);
    const bool asJson = p.isSet("json");
    if (!asJson) {
        std::printf("transfer benchmark: A %s (%d layers, %dx%d KV), B %s (%d layers, %dx%d KV), %s maps "
                    "(%lld parameters), k %d%s, %s %s, median of %d\n\n",
                    str(p.value("preset-a")).c_str(), ca.numLayers, ca.numKvHeads, ca.headDim,
                    str(p.value("preset-b")).c_str(), cb.numLayers, cb.numKvHeads, cb.headDim,
                    core::converterFamilyName(*family), (long long)set.parameterCount(), kk,
                    headMatched ? " per head" : "", gpu::describeDevice(lo.device).c_str(),
                    gpu::floatTypeName(lo.dtype), reps);
        std::printf("| tokens | B prefill ms | convert ms | A prefill ms | B prefill / convert | B prefill / "
                    "(A prefill + "
                    "convert) |\n");
        std::printf("|-------:|-------------:|-----------:|-------------:|--------------------:|-------------"
                    "-----------"
                    "---------:|\n");
    }
    json rows = json::array();
    for (int n : lengths) {
        const TransferTiming t = timeTransfer(*a, *b, conv, n, reps, rng);
        const double pb = t.prefillB, cm = t.convertMs, pa = t.prefillA;
        if (asJson)
            rows.push_back({{"tokens", n},
                            {"prefill_ms_b", pb},
                            {"convert_ms", cm},
                            {"prefill_ms_a", pa},
                            {"ratio_cached", pb / cm},
                            {"ratio_uncached", pb / (pa + cm)}});
        else
            std::printf("| %6d | %12.2f | %10.2f | %12.2f | %18.1fx | %31.2fx |\n", n, pb, cm, pa, pb / cm,
                        pb / (pa + cm));
        std::fflush(stdout);
    }
    if (asJson)
        std::printf("%s\n", json{{"rows", rows}}.dump(2).c_str());
    else
        std::printf(
            "\nconvert = A's cached K/V (all layers) mapped into B's cache, RoPE removed and re-applied; it "
            "replaces B's prefill of those tokens.\n");
    return 0;
}

} // namespace kvwb::app
