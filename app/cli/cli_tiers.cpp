#include "app/cli/cli_tiers.h"

#include "app/cli/cli_util.h"
#include "core/cache/exact_tier.h"
#include "core/cache/prefix_tree.h"
#include "core/cache/semantic_tier.h"

#include <QCommandLineParser>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

namespace kvwb::app {

using namespace kvwb::app::cli;

namespace {

using Clock = std::chrono::steady_clock;

double microsSince(Clock::time_point t0)
{
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Percentiles
{
    double p50 = 0, p99 = 0, mean = 0;
};

Percentiles percentiles(std::vector<double> us)
{
    Percentiles p;
    if (us.empty())
        return p;
    std::sort(us.begin(), us.end());
    p.p50 = us[us.size() / 2];
    p.p99 = us[std::min(us.size() - 1, size_t(double(us.size()) * 0.99))];
    double sum = 0;
    for (double u : us)
        sum += u;
    p.mean = sum / double(us.size());
    return p;
}

// Resident set size from /proc (Linux); 0 elsewhere.
double rssMiB()
{
    std::FILE *f = std::fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    long pages = 0, resident = 0;
    const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
    std::fclose(f);
    return n == 2 ? double(resident) * 4096.0 / 1048576.0 : 0;
}

void row(const char *tier, const char *op, size_t entries, size_t samples, const Percentiles &p,
         const std::string &note)
{
    std::printf("| %-8s | %-22s | %9zu | %7zu | %8.2f | %8.2f | %8.2f | %s |\n", tier, op, entries, samples,
                p.p50, p.p99, p.mean, note.c_str());
    std::fflush(stdout);
}

std::vector<float> randomUnit(std::mt19937_64 &rng, int dim)
{
    std::normal_distribution<float> g;
    std::vector<float> v(static_cast<size_t>(dim));
    double sq = 0;
    for (float &x : v) {
        x = g(rng);
        sq += double(x) * x;
    }
    const float inv = float(1.0 / std::sqrt(sq));
    for (float &x : v)
        x *= inv;
    return v;
}

// Eight partial sums so the compiler can keep them in vector registers.
float dot(const float *a, const float *b, int dim)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int j = 0; j < 8; ++j)
            s[j] += a[i + j] * b[i + j];
    float total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < dim; ++i)
        total += a[i] * b[i];
    return total;
}

void benchExact(size_t entries, std::mt19937_64 &rng)
{
    core::TierLimits limits; // unlimited: every key stays, so a hit is a hit
    core::ExactTier tier(limits);
    const int tenants = 8;
    auto keyOf = [&](size_t i) {
        return core::ExactKey{{fmt::format("tenant-{}", i % tenants), "fp-3b1c9e"},
                              fmt::format("What does concept {} mean in context {}?", i, i % 997),
                              "greedy max=64"};
    };
    const double rss0 = rssMiB();
    const auto t0 = Clock::now();
    for (size_t i = 0; i < entries; ++i) {
        core::CachedResponse r;
        r.text = fmt::format("Concept {} is a kind of thing.", i);
        r.outputIds.assign(12, int(i % 32000));
        r.requestId = int64_t(i);
        tier.insert(keyOf(i), std::move(r), int64_t(i));
    }
    const double insertUs = microsSince(t0) / double(entries);
    const double rss = rssMiB() - rss0;
    const size_t samples = std::min<size_t>(200000, entries);
    std::vector<core::ExactKey> hits, misses;
    for (size_t i = 0; i < samples; ++i) {
        hits.push_back(keyOf(rng() % entries));
        misses.push_back(keyOf(entries + rng() % entries)); // never inserted
    }
    std::vector<double> hitUs, missUs;
    hitUs.reserve(samples);
    missUs.reserve(samples);
    size_t found = 0;
    for (size_t i = 0; i < samples; ++i) {
        auto t = Clock::now();
        found += tier.lookup(hits[i], int64_t(entries + i)) ? 1 : 0;
        hitUs.push_back(microsSince(t));
        t = Clock::now();
        found += tier.lookup(misses[i], int64_t(entries + i)) ? 1 : 0;
        missUs.push_back(microsSince(t));
    }
    row("exact", "lookup (hit)", entries, samples, percentiles(hitUs),
        fmt::format("{} of {} hit; insert {:.2f} us/entry, {:.0f} B/entry RSS", found, samples, insertUs,
                    rss * 1048576.0 / double(entries)));
    row("exact", "lookup (miss)", entries, samples, percentiles(missUs), "");
}

void benchSemantic(size_t entries, int dim, std::mt19937_64 &rng)
{
    core::TierLimits limits;
    core::SemanticTier tier(limits, dim, 0.8);
    std::vector<float> stored; // [entries, dim] for the brute-force reference
    stored.reserve(entries * size_t(dim));
    const auto t0 = Clock::now();
    std::vector<double> insertUs;
    insertUs.reserve(entries);
    for (size_t i = 0; i < entries; ++i) {
        const auto v = randomUnit(rng, dim);
        stored.insert(stored.end(), v.begin(), v.end());
        core::CachedResponse r;
        r.requestId = int64_t(i);
        const auto t = Clock::now();
        tier.insert({"tenant", "fp"}, std::to_string(i), v, std::move(r), 0);
        insertUs.push_back(microsSince(t));
    }
    const double buildS = microsSince(t0) / 1e6;
    row("semantic", "insert", entries, entries, percentiles(insertUs),
        fmt::format("dim {}, M 16, ef_construction 200: built in {:.1f} s", dim, buildS));
    // Random queries (the hard case: every similarity near 0) and noisy copies of stored vectors
    // (the cache's case, cosine about 0.9 to their source).
    const size_t queries = 300;
    for (bool noisy : {false, true}) {
        std::vector<double> us;
        size_t agree = 0, hits = 0;
        for (size_t q = 0; q < queries; ++q) {
            std::vector<float> query = randomUnit(rng, dim);
            if (noisy) {
                const float *base = &stored[(rng() % entries) * size_t(dim)];
                const auto noise = randomUnit(rng, dim);
                for (int i = 0; i < dim; ++i)
                    query[size_t(i)] = base[i] + 0.45f * noise[size_t(i)];
                double sq = 0;
                for (float x : query)
                    sq += double(x) * x;
                for (float &x : query)
                    x = float(x / std::sqrt(sq));
            }
            const auto t = Clock::now();
            const auto hit = tier.lookup({"tenant", "fp"}, query, 0);
            us.push_back(microsSince(t));
            hits += hit ? 1 : 0;
            const auto n = tier.nearest({"tenant", "fp"}, query, 0);
            size_t best = 0;
            float bestSim = -2;
            for (size_t i = 0; i < entries; ++i) {
                const float s = dot(query.data(), &stored[i * size_t(dim)], dim);
                if (s > bestSim) {
                    bestSim = s;
                    best = i;
                }
            }
            agree += n && n->response.requestId == int64_t(best) ? 1 : 0;
        }
        row("semantic", noisy ? "lookup (noisy copy)" : "lookup (random query)", entries, queries,
            percentiles(us),
            fmt::format("recall@1 vs brute force {:.3f}; {} of {} over threshold 0.8",
                        double(agree) / queries, hits, queries));
    }
    core::LexicalEmbedder embedder(512);
    std::vector<std::string> texts;
    const char *words[] = {"how",       "do",  "i",       "reset", "my",     "password", "what",
                           "is",        "the", "capital", "of",    "france", "explain",  "quantum",
                           "computing", "to",  "a",       "child", "recipe", "pasta"};
    for (int i = 0; i < 5000; ++i) {
        std::string s;
        const int n = 6 + int(rng() % 14);
        for (int w = 0; w < n; ++w)
            s += std::string(w ? " " : "") + words[rng() % 20];
        texts.push_back(s + "?");
    }
    std::vector<double> us;
    double sink = 0;
    for (const auto &t : texts) {
        const auto t0e = Clock::now();
        sink += embedder.embed(t)[0];
        us.push_back(microsSince(t0e));
    }
    row("semantic", "LexicalEmbedder::embed", 0, texts.size(), percentiles(us),
        fmt::format("dim 512, 6-19 words per text{}", sink > 1e9 ? " " : ""));
}

void benchPrefix(size_t sequences, std::mt19937_64 &rng)
{
    // 64 shared "system prompts" of 128 tokens, then 32-480 tokens of per-request text; 16-token
    // blocks; room for 200k blocks (3.2M tokens), so the tree evicts once it is full.
    const int block = 16;
    core::TierLimits limits;
    limits.maxEntries = 200000;
    core::PrefixTree tree(limits, block, 4096);
    std::vector<std::vector<int>> systems(64);
    for (auto &s : systems)
        for (int i = 0; i < 128; ++i)
            s.push_back(int(rng() % 32000));
    std::vector<std::vector<int>> issued; // a sample of earlier sequences, replayed as repeats
    std::vector<double> lookupUs, insertUs;
    size_t matchedTokens = 0, totalTokens = 0;
    for (size_t i = 0; i < sequences; ++i) {
        std::vector<int> ids;
        if (!issued.empty() && rng() % 4 == 0) {
            ids = issued[rng() % issued.size()]; // a repeat: the whole prefix may hit
        } else {
            ids = systems[rng() % systems.size()];
            const int extra = 32 + int(rng() % 449);
            for (int t = 0; t < extra; ++t)
                ids.push_back(int(rng() % 32000));
            if (issued.size() < 10000)
                issued.push_back(ids);
            else
                issued[rng() % issued.size()] = ids;
        }
        const std::string tenant = fmt::format("tenant-{}", i % 4);
        auto t = Clock::now();
        const auto m = tree.lookup({tenant, "fp"}, ids, int64_t(i));
        lookupUs.push_back(microsSince(t));
        matchedTokens += size_t(m.tokens);
        totalTokens += ids.size();
        t = Clock::now();
        tree.insert({tenant, "fp"}, ids, uint64_t(i + 1), int64_t(i));
        insertUs.push_back(microsSince(t));
        tree.releasedHandles();
    }
    const auto st = tree.stats();
    row("prefix", "lookup", size_t(st.entries), sequences, percentiles(lookupUs),
        fmt::format("block {}; {:.1f}% of prompt tokens matched", block,
                    100.0 * double(matchedTokens) / double(totalTokens)));
    row("prefix", "insert", size_t(st.entries), sequences, percentiles(insertUs),
        fmt::format("{} blocks evicted", st.evictions));
}

} // namespace

int cmdBenchTiers(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"entries", "Exact-tier entries (default 1000000).", "N", "1000000"});
    // 50k by default: building the HNSW graph costs about 1.3 ms per 256-d insert here (135 s for
    // 100k on one core), and the default run should stay under 2 minutes.
    p.addOption({"semantic-entries", "Semantic-tier entries (default 50000).", "N", "50000"});
    p.addOption({"dim", "Semantic embedding size (default 256).", "N", "256"});
    p.addOption({"sequences", "Prefix-tree sequences (default 100000).", "N", "100000"});
    addSeedOption(p, "Random seed");
    parse(p, args,
          "Measure the cache tiers: exact lookup latency (hits and misses), semantic insert/lookup latency "
          "and HNSW recall@1 against brute force, LexicalEmbedder cost, prefix-tree lookup/insert latency. "
          "Latencies in microseconds, single thread.");
    const size_t entries = size_t(intOption(p, "entries", 1000000, 1));
    const size_t semanticEntries = size_t(intOption(p, "semantic-entries", 50000, 1));
    const int dim = intOption(p, "dim", 256, 1);
    const size_t sequences = size_t(intOption(p, "sequences", 100000, 1));
    std::mt19937_64 rng(uint64_t(intOption(p, "seed", 1, 0)));
    std::printf("cache tier benchmark: single thread, latencies in microseconds\n\n");
    std::printf(
        "| tier     | operation              |   entries | samples |  p50 us  |  p99 us  | mean us  | "
        "notes |\n");
    std::printf("|----------|------------------------|----------:|--------:|---------:|---------:|---------:|"
                "-------|\n");
    benchExact(entries, rng);
    benchSemantic(semanticEntries, dim, rng);
    benchPrefix(sequences, rng);
    return 0;
}

} // namespace kvwb::app
