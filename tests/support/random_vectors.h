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

} // namespace kvwb::test
