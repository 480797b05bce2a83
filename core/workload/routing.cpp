#include "core/workload/routing.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace kvwb::core {

namespace {

// FNV-1a 64: stable across runs and machines (std::hash is neither promised).
uint64_t fnv1a(const std::string &s)
{
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

} // namespace

std::string routingContext(const WorkloadRequest &r)
{
    if (!r.question.empty()) {
        const auto at = r.prompt.rfind("Q: " + r.question);
        if (at != std::string::npos)
            return r.prompt.substr(0, at);
    }
    return r.prompt;
}

std::vector<RouteDecision> routeRequests(const std::vector<WorkloadRequest> &requests,
                                         const RoutingOptions &o)
{
    if (o.workers < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("a fleet needs at least 1 worker, got {}", o.workers));
    if (!(o.drainUnitsPerSecond > 0))
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("least-loaded routing needs a positive drain rate, got {}", o.drainUnitsPerSecond));
    std::vector<RouteDecision> out;
    out.reserve(requests.size());
    std::vector<double> load(size_t(o.workers), 0.0); // outstanding work units
    int64_t lastMs = requests.empty() ? 0 : requests.front().tMs;
    for (size_t i = 0; i < requests.size(); ++i) {
        const WorkloadRequest &r = requests[i];
        RouteDecision d;
        switch (o.policy) {
        case RoutingPolicy::RoundRobin:
            d.worker = int(i % size_t(o.workers));
            d.note = "round-robin";
            break;
        case RoutingPolicy::TenantAffine:
            d.worker = int(fnv1a(r.tenant) % uint64_t(o.workers));
            d.note = "tenant-affine:" + r.tenant;
            break;
        case RoutingPolicy::PrefixHash: {
            const uint64_t h = fnv1a(r.tenant + '\x1f' + routingContext(r));
            d.worker = int(h % uint64_t(o.workers));
            d.note = fmt::format("prefix-hash:{:08x}", uint32_t(h >> 32));
            break;
        }
        case RoutingPolicy::LeastLoaded: {
            const double drained =
                double(std::max<int64_t>(0, r.tMs - lastMs)) / 1000.0 * o.drainUnitsPerSecond;
            for (double &l : load)
                l = std::max(0.0, l - drained);
            lastMs = std::max(lastMs, r.tMs);
            d.worker = int(std::min_element(load.begin(), load.end()) - load.begin());
            d.note = fmt::format("least-loaded:{:.0f}", load[size_t(d.worker)]);
            load[size_t(d.worker)] += double(r.prompt.size()) / 4.0 + 8.0 * r.maxTokens;
            break;
        }
        }
        out.push_back(std::move(d));
    }
    return out;
}

} // namespace kvwb::core
