// Routing a workload's requests over a fleet of replay workers (`kvwb replay --workers N
// --routing POLICY`, docs/fleet.md). Decided up front, in arrival order, from what a router in
// front of serving processes would know: the request (tenant, prompt, max tokens) and what it has
// sent where so far.
//
//   round-robin    request i -> worker i mod N
//   tenant-affine  a tenant's requests always go to one worker (hash of the tenant)
//   prefix-hash    cache-aware: requests sharing their context (the prompt before the question,
//                  i.e. the system prompt and any conversation history) go to one worker (hash of
//                  that context), so that worker's prefix cache sees every reuse of it
//   least-loaded   the worker with the least outstanding work at the request's arrival, work
//                  estimated as prompt bytes / 4 + 8 x max_tokens units, each worker draining
//                  drainUnitsPerSecond of workload time
//
// Pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"
#include "core/workload/workload.h"

#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

enum class RoutingPolicy
{
    RoundRobin,
    TenantAffine,
    PrefixHash,
    LeastLoaded
};
inline constexpr EnumName<RoutingPolicy> kRoutingPolicyNames[] = {
    {RoutingPolicy::RoundRobin, "round-robin"},
    {RoutingPolicy::TenantAffine, "tenant-affine"},
    {RoutingPolicy::PrefixHash, "prefix-hash"},
    {RoutingPolicy::LeastLoaded, "least-loaded"}};
KVWB_ENUM_NAMES(RoutingPolicy, kRoutingPolicyNames, routingPolicyName, parseRoutingPolicy)

struct RoutingOptions
{
    int workers = 1;
    RoutingPolicy policy = RoutingPolicy::RoundRobin;
    double drainUnitsPerSecond = 2000; // least-loaded
};

struct RouteDecision
{
    int worker = 0;
    std::string note; // what decided it, e.g. "prefix-hash:3fa2c1d0" or "least-loaded:1210"
};

// One decision per request, in the requests' order. Error(InvalidArgument) for workers < 1 or a
// drain rate that is not positive.
std::vector<RouteDecision> routeRequests(const std::vector<WorkloadRequest> &requests,
                                         const RoutingOptions &options);

// The context prefix-hash routes on: the prompt up to its question ("Q: <question>"), or the
// whole prompt when the question is not found in it.
std::string routingContext(const WorkloadRequest &request);

} // namespace kvwb::core
