// Portable seeded randomness for outputs that must be reproducible byte-for-byte (corpus, workload).
//
// std::mt19937_64 is specified bit-for-bit by the standard, but the std distributions are not
// (libstdc++ and libc++ draw differently), so generators derive every number through this class
// instead of std::uniform_int_distribution, std::shuffle or std::discrete_distribution.
// Thread-safety: one instance per thread; ZipfTable is immutable after construction.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace kvwb::core {

class SeededRandom
{
public:
    explicit SeededRandom(uint64_t seed) : m_engine(seed) {}

    uint64_t next() { return m_engine(); }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return double(m_engine() >> 11) * 0x1.0p-53; }
    // Uniform integer in [0, n); n must be > 0. Lemire's multiply-shift with rejection (unbiased).
    size_t below(size_t n)
    {
        const uint64_t range = n;
        unsigned __int128 m = static_cast<unsigned __int128>(m_engine()) * range;
        uint64_t low = static_cast<uint64_t>(m);
        if (low < range) {
            const uint64_t threshold = (0 - range) % range;
            while (low < threshold) {
                m = static_cast<unsigned __int128>(m_engine()) * range;
                low = static_cast<uint64_t>(m);
            }
        }
        return static_cast<size_t>(m >> 64);
    }
    // Exponential with the given rate (mean 1/rate): inter-arrival times of a Poisson process.
    double exponential(double rate) { return -std::log1p(-uniform()) / rate; }
    bool chance(double p) { return uniform() < p; }
    // Fisher-Yates.
    template <class T> void shuffle(std::vector<T> &v)
    {
        for (size_t i = v.size(); i > 1; --i)
            std::swap(v[i - 1], v[below(i)]);
    }

private:
    std::mt19937_64 m_engine;
};

// Zipf over ranks 0..n-1: P(rank k) proportional to 1 / (k + 1)^s. Sampled by binary search in
// the cumulative table (n is a few thousand concepts, so the table is tiny).
class ZipfTable
{
public:
    ZipfTable(size_t n, double s)
    {
        m_cumulative.reserve(n);
        double sum = 0;
        for (size_t k = 0; k < n; ++k) {
            sum += 1.0 / std::pow(double(k + 1), s);
            m_cumulative.push_back(sum);
        }
        for (double &c : m_cumulative)
            c /= sum;
    }
    size_t size() const { return m_cumulative.size(); }
    double probability(size_t k) const { return m_cumulative[k] - (k ? m_cumulative[k - 1] : 0.0); }
    size_t sample(SeededRandom &rng) const
    {
        const double u = rng.uniform();
        size_t lo = 0, hi = m_cumulative.size() - 1;
        while (lo < hi) {
            const size_t mid = (lo + hi) / 2;
            if (m_cumulative[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        return lo;
    }

private:
    std::vector<double> m_cumulative; // [n], non-decreasing, last element 1.0
};

} // namespace kvwb::core
