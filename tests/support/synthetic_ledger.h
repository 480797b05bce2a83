// Ledger rows for UI tests: a patterned ledger whose filter counts can be worked out by hand, and a
// random one shaped like a real replay (caches warming up, hits much faster than misses) for charts
// and screenshots. Header-only: each ui test is its own executable.
#pragma once

#include "core/ledger/replay_ledger.h"

#include <QCoreApplication>
#include <QDir>
#include <QWidget>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kvwb::testing {

// Row i: tenant i % 3 (acme, globex, initech), model "a" for even i, intent i % 7, answered by
// i % 10: 0-2 exact, 3-4 semantic, 5-6 prefix, 7 cross, 8-9 miss; a false hit when i % 20 == 3.
inline std::vector<core::LedgerRow> patternedLedger(int n, int firstId = 0)
{
    static const char *tenants[] = {"acme", "globex", "initech"};
    static const char *intents[] = {"billing", "refund", "shipping", "login", "billing-dispute", "other", ""};
    std::vector<core::LedgerRow> rows;
    for (int k = 0; k < n; ++k) {
        const int i = firstId + k;
        core::LedgerRow r;
        r.requestId = i;
        r.arrivalMs = int64_t(i) * 100;
        r.tenant = tenants[i % 3];
        r.model = i % 2 == 0 ? core::ModelRole::A : core::ModelRole::B;
        r.intent = intents[i % 7];
        const int d = i % 10;
        r.answeredBy = d <= 2   ? core::TierKind::Exact
                       : d <= 4 ? core::TierKind::Semantic
                       : d <= 6 ? core::TierKind::Prefix
                       : d == 7 ? core::TierKind::Cross
                                : core::TierKind::None;
        // Tiers are consulted in stack order until one answers.
        for (auto t : {core::TierKind::Exact, core::TierKind::Semantic, core::TierKind::Prefix,
                       core::TierKind::Cross}) {
            r.tierHits[t] = t == r.answeredBy;
            if (t == r.answeredBy)
                break;
        }
        r.falseHit = i % 20 == 3;
        if (r.falseHit) {
            r.cachedIntent = "refund";
            r.cachedRequestId = i - 1;
        }
        r.promptTokens = 100 + i % 50;
        r.tokensReused = r.answeredBy == core::TierKind::None ? 0 : 60;
        r.tokensComputed = r.promptTokens - r.tokensReused + 20;
        r.ttftMs = 5.0 + d;
        r.totalMs = 50.0 + d;
        if (r.answeredBy == core::TierKind::Cross) {
            r.gate = i % 30 == 7 ? kvwb::core::GateDecision::Fail : kvwb::core::GateDecision::Pass;
            r.gateValue = 0.12;
        }
        // Text that matches a search only where the intent does, besides "Q<i>:" and "Answer <i>:".
        r.question = "Q" + std::to_string(i) + ": what about " + r.intent + "?";
        r.answer = "Answer " + std::to_string(i) + ": see the " + r.intent + " page.";
        rows.push_back(r);
    }
    return rows;
}

// A replay of n requests through exact, semantic, prefix and cross tiers: the hit rate climbs as
// the caches fill (half-way after ~3000 requests), about 4% of semantic hits are false hits, hits
// answer in milliseconds and misses take 80-400 ms.
inline std::vector<core::LedgerRow> realisticLedger(int n, int firstId = 0, unsigned seed = 7)
{
    static const char *tenants[] = {"acme", "globex", "initech", "umbrella"};
    static const char *intents[] = {"billing", "refund", "shipping", "login", "password-reset", "upgrade"};
    std::mt19937 rng(seed + unsigned(firstId));
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<core::LedgerRow> rows;
    rows.reserve(size_t(n));
    for (int k = 0; k < n; ++k) {
        const int i = firstId + k;
        core::LedgerRow r;
        r.requestId = i;
        r.arrivalMs = int64_t(i) * 250;
        r.tenant = tenants[int(u(rng) * 4) % 4];
        r.model = u(rng) < 0.5 ? core::ModelRole::A : core::ModelRole::B;
        r.intent = intents[int(u(rng) * 6) % 6];
        r.promptTokens = 60 + int(u(rng) * 700);
        const double warm = 1.0 - std::exp(-double(i) / 4000.0);
        const double x = u(rng);
        r.answeredBy = x < 0.18 * warm   ? core::TierKind::Exact
                       : x < 0.33 * warm ? core::TierKind::Semantic
                       : x < 0.55 * warm ? core::TierKind::Prefix
                       : x < 0.63 * warm ? core::TierKind::Cross
                                         : core::TierKind::None;
        for (auto t : {core::TierKind::Exact, core::TierKind::Semantic, core::TierKind::Prefix,
                       core::TierKind::Cross}) {
            r.tierHits[t] = t == r.answeredBy;
            if (t == r.answeredBy)
                break;
        }
        const bool response =
            r.answeredBy == core::TierKind::Exact || r.answeredBy == core::TierKind::Semantic;
        r.similarity = r.answeredBy == core::TierKind::Exact ? -1 : 0.7 + 0.3 * u(rng);
        r.falseHit = r.answeredBy == core::TierKind::Semantic && u(rng) < 0.04;
        if (response) {
            r.cachedRequestId = std::max(0, i - 1 - int(u(rng) * 500));
            r.cachedIntent = r.falseHit ? "refund" : r.intent;
            if (r.falseHit && r.intent == "refund")
                r.cachedIntent = "billing";
        }
        r.generatedTokens = 40 + int(u(rng) * 200);
        r.tokensReused = response                               ? r.promptTokens
                         : r.answeredBy == core::TierKind::None ? 0
                                                                : int(r.promptTokens * (0.4 + 0.5 * u(rng)));
        r.tokensComputed = response ? 0 : r.promptTokens - r.tokensReused + r.generatedTokens;
        r.lookupMs = 0.3 + 2.0 * u(rng);
        switch (r.answeredBy) {
        case core::TierKind::Exact:
            r.ttftMs = r.lookupMs;
            break;
        case core::TierKind::Semantic:
            r.ttftMs = r.lookupMs + 6 + 4 * u(rng);
            break;
        case core::TierKind::Prefix:
        case core::TierKind::Cross:
            r.ttftMs = r.lookupMs + 0.15 * (r.promptTokens - r.tokensReused) + 10 + 20 * u(rng);
            break;
        case core::TierKind::None:
            r.ttftMs = r.lookupMs + 0.15 * r.promptTokens + 60 + 60 * u(rng) * u(rng) * 4;
            break;
        }
        r.totalMs = response ? r.ttftMs : r.ttftMs + 8.0 * r.generatedTokens;
        if (r.answeredBy == core::TierKind::Cross) {
            r.gateValue = 0.05 + 0.3 * u(rng);
            r.gate = r.gateValue < 0.3 ? kvwb::core::GateDecision::Pass : kvwb::core::GateDecision::Fail;
        }
        if (r.answeredBy != core::TierKind::None && u(rng) < 0.05) {
            r.shadowKl = r.falseHit ? 2.5 : 0.01 + 0.1 * u(rng);
            r.shadowExact = r.shadowKl < 0.05 ? 1 : 0;
        }
        // Questions and answers by intent (no random draws, so the numbers above stay as they were).
        static const char *questions[] = {
            "Why was I charged twice this month?", "How do I get my money back?",
            "When will my order arrive?",          "I cannot log in to my account",
            "How do I reset my password?",         "How do I move to the Pro plan?"};
        static const char *answers[] = {
            "A second charge is usually a pending authorisation; it drops off within 3 days.",
            "Open Orders, choose the order and press Request refund; refunds take 5-7 days.",
            "Standard shipping takes 3-5 working days; the tracking link is in your email.",
            "Check the email address, then use Forgot password; accounts lock after 5 tries.",
            "Use Forgot password on the sign-in page; the link is valid for one hour.",
            "Settings > Plan > Upgrade; the price difference is charged pro rata."};
        const size_t q = size_t(std::find_if(std::begin(intents), std::end(intents),
                                             [&](const char *n) { return r.intent == n; }) -
                                std::begin(intents));
        r.question = questions[q % 6];
        r.answer = answers[(r.falseHit ? q + 1 : q) % 6];
        rows.push_back(r);
    }
    return rows;
}

} // namespace kvwb::testing
