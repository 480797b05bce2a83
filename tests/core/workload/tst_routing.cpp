// Fleet routing (core/workload/routing.h): round-robin cycles; tenant-affine keeps a tenant on one
// worker; prefix-hash keeps requests of one context (system prompt + history) on one worker and
// spreads distinct contexts; least-loaded sends a burst to idle workers first and lets work drain
// with workload time; every decision is deterministic.
#include "core/util/error.h"
#include "core/workload/routing.h"
#include "tests/support/expect_error.h"

#include <QtTest>

#include <map>
#include <set>

using namespace kvwb;
using core::RoutingPolicy;

namespace {

core::WorkloadRequest req(int64_t id, int64_t tMs, const std::string &tenant, const std::string &system,
                          const std::string &question, int maxTokens = 16)
{
    core::WorkloadRequest r;
    r.id = id;
    r.tMs = tMs;
    r.tenant = tenant;
    r.model = core::ModelRole::B;
    r.question = question;
    r.prompt = core::requestPrompt(system, question);
    r.maxTokens = maxTokens;
    return r;
}

std::vector<core::RouteDecision> route(const std::vector<core::WorkloadRequest> &rs, int workers,
                                       RoutingPolicy p, double drain = 2000)
{
    core::RoutingOptions o;
    o.workers = workers;
    o.policy = p;
    o.drainUnitsPerSecond = drain;
    return core::routeRequests(rs, o);
}

} // namespace

class TestRouting : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void names()
    {
        for (auto p : {RoutingPolicy::RoundRobin, RoutingPolicy::TenantAffine, RoutingPolicy::PrefixHash,
                       RoutingPolicy::LeastLoaded})
            QCOMPARE(*core::parseRoutingPolicy(core::routingPolicyName(p)), p);
        QVERIFY(!core::parseRoutingPolicy("random"));
    }

    void roundRobinCycles()
    {
        std::vector<core::WorkloadRequest> rs;
        for (int i = 0; i < 7; ++i)
            rs.push_back(req(i, i, "t0", "S", "q" + std::to_string(i)));
        const auto d = route(rs, 3, RoutingPolicy::RoundRobin);
        for (int i = 0; i < 7; ++i)
            QCOMPARE(d[size_t(i)].worker, i % 3);
    }

    void tenantAffineAndPrefixHashKeepTheirGroupsTogether()
    {
        std::vector<core::WorkloadRequest> rs;
        const std::vector<std::string> systems = {"You are terse.",    "You are a tutor.",
                                                  "You are a poet.",   "You answer in French.",
                                                  "You are a lawyer.", "You are a cook."};
        int id = 0;
        for (int round = 0; round < 5; ++round)
            for (int t = 0; t < 8; ++t)
                for (size_t s = 0; s < systems.size(); ++s, ++id)
                    rs.push_back(req(id, id * 10, "t" + std::to_string(t), systems[s],
                                     "question " + std::to_string(round * 7 + t)));
        const auto byTenant = route(rs, 4, RoutingPolicy::TenantAffine);
        const auto byPrefix = route(rs, 4, RoutingPolicy::PrefixHash);
        std::map<std::string, std::set<int>> tenantWorkers, contextWorkers;
        std::set<int> used;
        for (size_t i = 0; i < rs.size(); ++i) {
            tenantWorkers[rs[i].tenant].insert(byTenant[i].worker);
            contextWorkers[rs[i].tenant + "|" + core::routingContext(rs[i])].insert(byPrefix[i].worker);
            used.insert(byPrefix[i].worker);
            QVERIFY(byPrefix[i].note.rfind("prefix-hash:", 0) == 0);
            QCOMPARE(byTenant[i].note, "tenant-affine:" + rs[i].tenant);
        }
        for (const auto &[t, ws] : tenantWorkers)
            QCOMPARE(int(ws.size()), 1);
        QCOMPARE(int(contextWorkers.size()), 8 * 6);
        for (const auto &[c, ws] : contextWorkers)
            QCOMPARE(int(ws.size()), 1);
        QVERIFY(used.size() >= 3); // 48 contexts over 4 workers: spread, not piled on one
        // the context is the prompt before its question
        QCOMPARE(core::routingContext(rs[0]), core::requestPrompt(systems[0], "question 0").substr(0, 16));
        // deterministic
        QCOMPARE(route(rs, 4, RoutingPolicy::PrefixHash)[17].worker, byPrefix[17].worker);
    }

    void leastLoadedFillsIdleWorkersAndDrains()
    {
        // a burst of 3 at t=0 over 3 workers: one each; then (no time passed) the lightest one
        std::vector<core::WorkloadRequest> rs = {req(0, 0, "t", "S", "a", 100), req(1, 0, "t", "S", "b", 10),
                                                 req(2, 0, "t", "S", "c", 50), req(3, 0, "t", "S", "d", 10)};
        auto d = route(rs, 3, RoutingPolicy::LeastLoaded);
        QCOMPARE(d[0].worker, 0);
        QCOMPARE(d[1].worker, 1);
        QCOMPARE(d[2].worker, 2);
        QCOMPARE(d[3].worker, 1); // 8 x 10 + prompt/4: the least outstanding
        QCOMPARE(d[0].note, std::string("least-loaded:0"));
        // after enough workload time every worker has drained: back to worker 0
        rs.push_back(req(4, 60000, "t", "S", "e", 10));
        d = route(rs, 3, RoutingPolicy::LeastLoaded);
        QCOMPARE(d[4].worker, 0);
        QCOMPARE(d[4].note, std::string("least-loaded:0"));
    }

    void badOptions()
    {
        const std::vector<core::WorkloadRequest> rs = {req(0, 0, "t", "S", "a")};
        QCOMPARE(test::expectError([&] { route(rs, 0, RoutingPolicy::RoundRobin); }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] { route(rs, 2, RoutingPolicy::LeastLoaded, 0); }).code(),
                 core::ErrorCode::InvalidArgument);
        QVERIFY(route({}, 2, RoutingPolicy::LeastLoaded).empty());
    }
};

QTEST_GUILESS_MAIN(TestRouting)
#include "tst_routing.moc"
