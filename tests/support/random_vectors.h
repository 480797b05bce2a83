// Vectors for index and similarity tests: seeded random unit vectors and a double-precision dot
// product (the brute-force reference the indexes are checked against).
#pragma once

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace kvwb::test {

inline std::vector<float> randomUnit(std::mt19937_64 &rng, int dim)
{
    std::normal_distribution<float> g;
    std::vector<float> v(static_cast<size_t>(dim));
    double sq = 0;
    for (float &x : v) {
        x = g(rng);
        sq += double(x) * x;
    }
    for (float &x : v)
        x = float(x / std::sqrt(sq));
    return v;
}

inline double dot(const std::vector<float> &a, const std::vector<float> &b)
{
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i)
        s += double(a[i]) * b[i];
    return s;
}

// A query for an index holding `stored`: a random unit vector, or (noisy) a stored vector plus 0.08
// of one (cosine about 0.9 to it: what a paraphrase of a cached prompt looks like).
inline std::vector<float> recallQuery(std::mt19937_64 &rng, const std::vector<std::vector<float>> &stored,
                                      int dim, bool noisy)
{
    std::vector<float> query = randomUnit(rng, dim);
    if (noisy) {
        const auto &base = stored[rng() % stored.size()];
        for (size_t i = 0; i < query.size(); ++i)
            query[i] = base[i] + 0.08f * query[i];
    }
    return query;
}

// The index of the stored vector with the largest inner product with query (brute force).
inline size_t bruteNearest(const std::vector<float> &query, const std::vector<std::vector<float>> &stored)
{
    size_t best = 0;
    double bestDot = -1e300;
    for (size_t i = 0; i < stored.size(); ++i)
        if (const double d = dot(query, stored[i]); d > bestDot) {
            bestDot = d;
            best = i;
        }
    return best;
}

} // namespace kvwb::test
