// replayWorkload on a tiny random model pair, driven directly (not through the binary): what each
// tier serves, what it reuses and that reuse changes no answer. Exact hits return the stored answer
// with nothing computed; a prefix hit reuses whole blocks of an earlier prompt and answers as the
// same request from scratch does; tenants do not see each other's entries; the cross-model tier
// converts A's cached prefix for B through an identity converter (gate passes, B's answer
// unchanged) and refuses a converter that destroys the cache (gate fails, B computes it all);
// shadow re-runs confirm hits; the knowledge tier places a concept's module, computed once.
#include "core/model/random_model.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "gpu/replay/knowledge_tier.h"
#include "gpu/replay/replay.h"
#include "tests/support/identity_map.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <memory>

using namespace kvwb;
namespace fs = std::filesystem;
using core::TierKind;

namespace {

const std::string kPrompt = "The quick brown fox jumps over the lazy dog near the river bank at dawn, twice.";
const std::string kLonger = kPrompt + " Then it ran far away.";

core::WorkloadRequest request(int64_t id, core::ModelRole model, const std::string &tenant,
                              const std::string &prompt)
{
    core::WorkloadRequest r;
    r.id = id;
    r.tMs = id * 10;
    r.tenant = tenant;
    r.user = "u" + std::to_string(id);
    r.model = model;
    r.maxTokens = 6;
    r.prompt = prompt;
    return r;
}

struct Pair
{
    QTemporaryDir tmp;
    std::unique_ptr<gpu::Model> a, b; // one checkpoint, two instances (caches are per instance)
    std::unique_ptr<core::Tokenizer> tok;
    Pair()
    {
        const fs::path dir = fs::path(tmp.path().toStdString()) / "m";
        core::writeRandomHfModel(dir, core::randomModelPreset("gqa"));
        a = gpu::Model::load(dir, {});
        b = gpu::Model::load(dir, {});
        tok = core::loadTokenizer(dir);
    }
    gpu::ReplayModels models(const gpu::Converter *converter = nullptr) const
    {
        gpu::ReplayModels m;
        m.a = a.get();
        m.b = b.get();
        m.tokenizerA = tok.get();
        m.tokenizerB = tok.get();
        m.converter = converter;
        return m;
    }
};

// The same requests with no tier at all: every answer computed from scratch.
std::vector<std::string> fromScratch(const Pair &p, const std::vector<core::WorkloadRequest> &requests)
{
    gpu::ReplayOptions o;
    return gpu::replayWorkload(requests, p.models(), o).outputs;
}

} // namespace

class TestReplay : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void exactPrefixAndTenants()
    {
        Pair p;
        const std::vector<core::WorkloadRequest> requests = {
            request(0, core::ModelRole::A, "t0", kPrompt), request(1, core::ModelRole::A, "t0", kPrompt),
            request(2, core::ModelRole::A, "t0", kLonger), request(3, core::ModelRole::A, "t1", kPrompt)};
        gpu::ReplayOptions o;
        o.tiers = {TierKind::Exact, TierKind::Prefix};
        o.prefixBlock = 16;
        const auto r = gpu::replayWorkload(requests, p.models(), o);
        QCOMPARE(r.rows.size(), size_t(4));
        const auto scratch = fromScratch(p, requests);
        QCOMPARE(r.outputs, scratch); // no tier changed an answer
        // The ledger keeps each request's text and the answer it got (an exact hit's is the cached one);
        // without a question field, the prompt stands for it.
        for (size_t i = 0; i < r.rows.size(); ++i) {
            QCOMPARE(r.rows[i].question, core::ledgerText(requests[i].prompt, true));
            QCOMPARE(r.rows[i].answer, core::ledgerText(r.outputs[i]));
        }
        QVERIFY(!r.rows[1].answer.empty());
        QCOMPARE(r.rows[1].answer, r.rows[0].answer);

        const auto &first = r.rows[0], &exact = r.rows[1], &prefix = r.rows[2], &other = r.rows[3];
        QCOMPARE(first.answeredBy, TierKind::None);
        QCOMPARE(first.tokensReused, 0);
        QCOMPARE(first.tierHits.at(TierKind::Exact), false);
        QCOMPARE(first.tierHits.at(TierKind::Prefix), false);

        QCOMPARE(exact.answeredBy, TierKind::Exact);
        QCOMPARE(exact.tokensReused, exact.promptTokens);
        QCOMPARE(exact.tokensComputed, 0);
        QCOMPARE(exact.cachedRequestId, int64_t(0));

        // the longer prompt reuses the first one's whole blocks, never its last token
        QCOMPARE(prefix.answeredBy, TierKind::Prefix);
        QCOMPARE(prefix.tierHits.at(TierKind::Exact), false);
        QVERIFY(prefix.tokensReused > 0);
        QCOMPARE(prefix.tokensReused % o.prefixBlock, 0);
        QVERIFY(prefix.tokensReused <= first.promptTokens);
        QCOMPARE(prefix.tokensComputed, prefix.promptTokens - prefix.tokensReused + prefix.generatedTokens);

        // another tenant's entries never answer
        QCOMPARE(other.answeredBy, TierKind::None);
        QCOMPARE(other.tokensReused, 0);

        QCOMPARE(r.summary.requests, int64_t(4));
    }

    void crossModelGate()
    {
        Pair p;
        const std::vector<core::WorkloadRequest> requests = {request(0, core::ModelRole::A, "t0", kPrompt),
                                                             request(1, core::ModelRole::B, "t0", kLonger)};
        const auto scratch = fromScratch(p, requests);
        gpu::ReplayOptions o;
        o.tiers = {TierKind::Prefix, TierKind::Cross};
        o.prefixBlock = 16;
        o.cross.minTokens = 16;
        // a random model's next-token distributions are near uniform, so even a destroyed cache moves
        // them little in absolute terms (tail KL ~7e-5 here, against ~1e-14 for the identity maps):
        // the threshold sits between the two
        o.cross.gateThreshold = 1e-9;

        // identity maps between two instances of one model: the converted cache is B's own
        const auto identity = gpu::Converter::create(
            test::identityConverter(p.b->config(), core::KeyForm::PreRope), *p.a, *p.b);
        const auto pass = gpu::replayWorkload(requests, p.models(&identity), o);
        const auto &hit = pass.rows[1];
        QCOMPARE(hit.answeredBy, TierKind::Cross);
        QCOMPARE(hit.gate, core::GateDecision::Pass);
        QVERIFY(hit.gateValue <= o.cross.gateThreshold);
        QVERIFY(hit.tokensReused >= o.cross.minTokens);
        QCOMPARE(pass.outputs, scratch);

        // maps of zeros destroy the cache: the gate refuses it and B computes the whole prompt
        auto zeros = test::identityConverter(p.b->config(), core::KeyForm::PreRope);
        for (auto &layer : zeros.layers)
            for (auto *maps : {&layer.keys, &layer.values})
                for (auto &m : *maps)
                    std::fill(m.weight.begin(), m.weight.end(), 0.0f);
        const auto destroyed = gpu::Converter::create(zeros, *p.a, *p.b);
        const auto fail = gpu::replayWorkload(requests, p.models(&destroyed), o);
        const auto &refused = fail.rows[1];
        QCOMPARE(refused.gate, core::GateDecision::Fail);
        QVERIFY(refused.gateValue > o.cross.gateThreshold);
        QCOMPARE(refused.answeredBy, TierKind::None);
        QCOMPARE(refused.tokensReused, 0);
        QCOMPARE(fail.outputs, scratch);

        // without the gate the destroyed cache is used: reuse is counted, and the answer is B's
        // from that cache (whatever it is), still as a cross-model hit
        o.cross.gate = false;
        const auto ungated = gpu::replayWorkload(requests, p.models(&destroyed), o);
        QCOMPARE(ungated.rows[1].answeredBy, TierKind::Cross);
        QCOMPARE(ungated.rows[1].gate, core::GateDecision::None);
    }

    // What a cross-model hit produced is not B's own answer or cache: no tier keeps it, so the same
    // request again is a cross-model hit again, never an exact or prefix hit (while a miss's answer
    // is cached as usual), and the summary counts the approximate hits.
    void approximateAnswersAreNeverCachedAgain()
    {
        Pair p;
        const auto identity = gpu::Converter::create(
            test::identityConverter(p.b->config(), core::KeyForm::PreRope), *p.a, *p.b);
        gpu::ReplayOptions o;
        o.tiers = {TierKind::Exact, TierKind::Prefix, TierKind::Cross};
        o.prefixBlock = 16;
        o.cross.minTokens = 16;
        o.cross.gate = false;
        const std::vector<core::WorkloadRequest> requests = {request(0, core::ModelRole::A, "t0", kPrompt),
                                                             request(1, core::ModelRole::B, "t0", kLonger),
                                                             request(2, core::ModelRole::B, "t0", kLonger)};
        const auto r = gpu::replayWorkload(requests, p.models(&identity), o);
        QCOMPARE(r.rows[1].answeredBy, TierKind::Cross);
        QCOMPARE(r.rows[2].answeredBy, TierKind::Cross);
        QCOMPARE(r.rows[2].tierHits.at(TierKind::Exact), false);
        QCOMPARE(r.rows[2].tierHits.at(TierKind::Prefix), false);
        QCOMPARE(r.summary.approximateHits, int64_t(2));
        QCOMPARE(r.outputs[2], r.outputs[1]);

        // control: B's own answer to a miss is cached, so the repeat is an exact hit
        const std::vector<core::WorkloadRequest> own = {request(0, core::ModelRole::B, "t0", kLonger),
                                                        request(1, core::ModelRole::B, "t0", kLonger)};
        const auto m = gpu::replayWorkload(own, p.models(&identity), o);
        QCOMPARE(m.rows[0].answeredBy, TierKind::None);
        QCOMPARE(m.rows[1].answeredBy, TierKind::Exact);
        QCOMPARE(m.summary.approximateHits, int64_t(0));
    }

    void shadowRunsConfirmHits()
    {
        Pair p;
        const std::vector<core::WorkloadRequest> requests = {request(0, core::ModelRole::A, "t0", kPrompt),
                                                             request(1, core::ModelRole::A, "t0", kLonger)};
        gpu::ReplayOptions o;
        o.tiers = {TierKind::Prefix};
        o.shadowFraction = 1.0;
        const auto r = gpu::replayWorkload(requests, p.models(), o);
        QCOMPARE(r.rows[0].shadowExact, -1); // a miss is not verified
        QCOMPARE(r.rows[1].answeredBy, TierKind::Prefix);
        QCOMPARE(r.rows[1].shadowExact, 1);
        QVERIFY(r.rows[1].shadowKl >= 0 && r.rows[1].shadowKl < 1e-6);
    }

    // The knowledge tier: a question naming a node's concept is answered from the node's module
    // placed behind the request's system prompt - computed on first use, reused after -; a question
    // naming no concept of the graph is rejected by verification and computed.
    void knowledgePlacement()
    {
        Pair p;
        core::KnowledgeFile file;
        core::ConceptNode car;
        car.id = "car";
        car.name = "car";
        car.questions = {"What is a car?"};
        car.knowledge = "A car is a road vehicle with four wheels and an engine.";
        core::ConceptNode dog;
        dog.id = "dog";
        dog.name = "dog";
        dog.questions = {"What is a dog?"};
        dog.knowledge = "A dog is a domestic animal that barks.";
        file.graph.add(car);
        file.graph.add(dog);
        core::LexicalEmbedder embedder(512);
        gpu::KnowledgeTier tier({{"", file}}, *p.b, *p.tok, embedder, {}, {});
        const auto ask = [](int64_t id, const std::string &question) {
            auto r = request(id, core::ModelRole::B, "t0", "You answer briefly.\n\nQ: " + question + "\nA:");
            r.question = question;
            return r;
        };
        const std::vector<core::WorkloadRequest> requests = {
            ask(0, "What is a car?"), ask(1, "What is a car?"), ask(2, "What is a bicycle?")};
        gpu::ReplayOptions o;
        o.tiers = {TierKind::Knowledge};
        auto models = p.models();
        models.embedder = &embedder;
        models.knowledge = &tier;
        const auto r = gpu::replayWorkload(requests, models, o);
        QCOMPARE(r.rows.size(), size_t(3));
        for (int i : {0, 1}) {
            QCOMPARE(r.rows[size_t(i)].answeredBy, TierKind::Knowledge);
            QCOMPARE(r.rows[size_t(i)].knowledgeNode, std::string("car"));
            QCOMPARE(r.rows[size_t(i)].knowledgeVerdict, core::KnowledgeVerdict::Verified);
        }
        // the file had no modules: the first use computes the module (nothing reused), the second
        // reuses it and computes only the system prompt's tail, the profile line and the question
        QCOMPARE(r.rows[0].knowledgeModule, core::ModuleFate::Recomputed);
        QCOMPARE(r.rows[0].tokensReused, 0);
        QCOMPARE(r.rows[1].knowledgeModule, core::ModuleFate::Reused);
        QVERIFY(r.rows[1].tokensReused > 0);
        QVERIFY(r.rows[1].tokensComputed < r.rows[0].tokensComputed);
        QCOMPARE(r.outputs[0], r.outputs[1]);
        QCOMPARE(r.rows[2].answeredBy, TierKind::None); // names no concept of the graph
        QCOMPARE(r.rows[2].knowledgeVerdict, core::KnowledgeVerdict::Rejected);
        QCOMPARE(tier.costs().modulesRecomputed, int64_t(1));
        QCOMPARE(tier.scopes()[0].file.graph.find("car")->reuseCount, int64_t(2));
        QCOMPARE(tier.scopes()[0].file.graph.find("dog")->reuseCount, int64_t(0));
    }

    void refusesBadSetups()
    {
        Pair p;
        const std::vector<core::WorkloadRequest> requests = {request(0, core::ModelRole::B, "t0", kPrompt)};
        gpu::ReplayOptions o;
        o.tiers = {TierKind::Cross};
        try { // the cross tier without a converter
            gpu::replayWorkload(requests, p.models(), o);
            QFAIL("no error");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        }
        o.tiers = {};
        auto onlyA = p.models();
        onlyA.b = nullptr;
        onlyA.tokenizerB = nullptr;
        try { // a request for a model that is not loaded names the request
            gpu::replayWorkload(requests, onlyA, o);
            QFAIL("no error");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
            QVERIFY2(std::string(e.what()).find("request 0 asks for model b, but no model B is loaded") !=
                         std::string::npos,
                     e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestReplay)
#include "tst_replay.moc"
