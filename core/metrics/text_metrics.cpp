#include "core/metrics/text_metrics.h"

#include "core/util/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace kvwb::core {

std::vector<std::string> normalizedWords(const std::string &text)
{
    std::vector<std::string> out;
    std::string cur;
    for (char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (std::isalnum(c) || c >= 0x80) {
            cur += char(std::tolower(c));
        } else if (!cur.empty()) {
            out.push_back(cur);
            cur.clear();
        }
    }
    if (!cur.empty())
        out.push_back(cur);
    return out;
}

double wordF1(const std::string &candidate, const std::string &reference)
{
    const auto a = normalizedWords(candidate), b = normalizedWords(reference);
    if (a.empty() || b.empty())
        return a.empty() && b.empty() ? 1.0 : 0.0;
    std::map<std::string, int> counts;
    for (const auto &w : b)
        ++counts[w];
    int common = 0;
    for (const auto &w : a)
        if (counts[w]-- > 0)
            ++common;
    if (common == 0)
        return 0.0;
    const double precision = double(common) / double(a.size()), recall = double(common) / double(b.size());
    return 2 * precision * recall / (precision + recall);
}

double rougeL(const std::vector<std::string> &a, const std::vector<std::string> &b)
{
    if (a.empty() || b.empty())
        return a.empty() && b.empty() ? 1.0 : 0.0;
    // LCS by dynamic programming over one row: O(|a| |b|) time, O(|b|) memory
    std::vector<int> row(b.size() + 1, 0);
    for (const auto &wa : a) {
        int diag = 0;
        for (size_t j = 1; j <= b.size(); ++j) {
            const int up = row[j];
            row[j] = wa == b[j - 1] ? diag + 1 : std::max(row[j], row[j - 1]);
            diag = up;
        }
    }
    const double lcs = row.back();
    if (lcs == 0)
        return 0.0;
    const double p = lcs / double(a.size()), r = lcs / double(b.size());
    return 2 * p * r / (p + r);
}

double rougeL(const std::string &candidate, const std::string &reference)
{
    return rougeL(normalizedWords(candidate), normalizedWords(reference));
}

bool answerFound(const std::string &generated, const std::string &answer, size_t words)
{
    auto want = normalizedWords(answer);
    want.resize(std::min(want.size(), words));
    if (want.empty())
        return false;
    const auto have = normalizedWords(generated);
    return std::search(have.begin(), have.end(), want.begin(), want.end()) != have.end();
}

double pearson(const std::vector<double> &x, const std::vector<double> &y)
{
    if (x.size() != y.size())
        throw Error(ErrorCode::InvalidArgument, "pearson: samples of different lengths");
    const size_t n = x.size();
    if (n < 2)
        return std::numeric_limits<double>::quiet_NaN();
    const double mx = std::accumulate(x.begin(), x.end(), 0.0) / double(n);
    const double my = std::accumulate(y.begin(), y.end(), 0.0) / double(n);
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; ++i) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (sxx <= 0 || syy <= 0)
        return std::numeric_limits<double>::quiet_NaN();
    return sxy / std::sqrt(sxx * syy);
}

namespace {
std::vector<double> ranks(const std::vector<double> &v)
{
    std::vector<size_t> order(v.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < order.size();) {
        size_t j = i;
        while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]])
            ++j;
        const double mean = (double(i) + double(j)) / 2.0 + 1.0;
        for (size_t k = i; k <= j; ++k)
            r[order[k]] = mean;
        i = j + 1;
    }
    return r;
}
} // namespace

double spearman(const std::vector<double> &x, const std::vector<double> &y)
{
    if (x.size() != y.size())
        throw Error(ErrorCode::InvalidArgument, "spearman: samples of different lengths");
    return pearson(ranks(x), ranks(y));
}

} // namespace kvwb::core
