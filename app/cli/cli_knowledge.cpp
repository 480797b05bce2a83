#include "app/cli/cli_knowledge.h"

#include "app/cli/engine_options.h"
#include "app/jobs/knowledge_eval.h"
#include "app/jobs/knowledge_job.h"
#include "core/cache/semantic_tier.h"
#include "core/knowledge/knowledge_graph.h"
#include "core/knowledge/user_profiles.h"
#include "core/ledger/replay_ledger.h"
#include "core/metrics/distributions.h"
#include "core/model/checkpoint.h"
#include "core/store/knowledge_store.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/workload/corpus.h"
#include "core/workload/wordnet.h"
#include "core/workload/workload.h"
#include "gpu/knowledge/knowledge_modules.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

namespace kvwb::app {

using namespace kvwb::app::cli;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

int build(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"out", "The knowledge graph file to write (HDF5, replaced whole).", "GRAPH.h5"});
    addForceOption(p);
    p.addOption({"model-b", "Model B, whose KV modules of each node's knowledge are stored.", "PATH"});
    p.addOption({"concepts",
                 "The N most popular WordNet concepts, as the demo corpus selects them (default 1000).", "N",
                 "1000"});
    p.addOption({"from", "Concepts from a JSONL file instead of WordNet (docs/knowledge.md).", "FILE.jsonl"});
    p.addOption({"wordnet-dir",
                 QString("WordNet database directory (default %1).").arg(core::WordNet::kDefaultDir), "DIR",
                 core::WordNet::kDefaultDir});
    p.addOption({"system", "Text the modules are computed after (default: none, only BOS).", "TEXT"});
    p.addOption({"no-modules", "Write the graph only (no model needed)."});
    p.addOption({"json", "Print the summary as JSON."});
    addEngineOptions(p);
    parse(
        p, args,
        "Build a knowledge graph file: concept nodes (names, synonyms, typed relations, knowledge text) and, "
        "for model B, each node's knowledge as a KV module computed once.");
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    outputFileOption(p, "out");
    if (p.isSet("from") && p.isSet("concepts"))
        throw UsageError{"give --concepts (WordNet) or --from (a JSONL file), not both"};
    if (p.isSet("no-modules") == p.isSet("model-b"))
        throw UsageError{"give --model-b (to compute the modules) or --no-modules"};
    const int64_t now = core::unixMsNow();
    core::KnowledgeFile k;
    if (p.isSet("from")) {
        k.graph = core::graphFromJsonl(str(p.value("from")), now);
        k.description = "concepts from " + str(p.value("from"));
    } else {
        const int count = intOption(p, "concepts", 1000, 1, 100000);
        const auto wn = core::WordNet::load(str(p.value("wordnet-dir")));
        k.graph = core::graphFromWordNet(wn, size_t(count), now);
        k.description = fmt::format("wordnet-3.0: the {} most popular noun concepts", count);
    }
    int64_t tokens = 0;
    double computeMs = 0;
    if (p.isSet("model-b")) {
        auto model = gpu::Model::load(str(p.value("model-b")), loadOptions(p));
        const auto tok = loadModelTokenizer(*model);
        InterruptScope ctrlC;
        tokens = jobs::computeKnowledgeModules(
            k, *model, *tok, p.isSet("system") ? str(p.value("system")) : std::string(), now,
            [&](size_t done, size_t total) {
                if (!p.isSet("json") && done > 0 && (done % 50 == 0 || done == total))
                    std::fprintf(stderr, "\rcomputed %zu/%zu modules%s", done, total,
                                 done == total ? "\n" : "");
                return !InterruptScope::interrupted();
            });
        if (!k.modules) {
            std::fprintf(stderr, "\ninterrupted: nothing written\n");
            return 130;
        }
        for (const auto &m : k.modules->modules)
            computeMs += m.computeMs;
    }
    core::saveKnowledge(str(p.value("out")), k);
    json relations = {{"hypernym", 0}, {"hyponym", 0}, {"sibling", 0}};
    for (const auto &n : k.graph.nodes())
        for (const auto &r : n.related)
            relations[core::relationKindName(r.kind)] =
                relations[core::relationKindName(r.kind)].get<int>() + 1;
    const json out = {{"out", str(p.value("out"))},
                      {"description", k.description},
                      {"nodes", k.graph.size()},
                      {"relations", relations},
                      {"modules", k.modules ? k.modules->modules.size() : 0},
                      {"module_tokens", tokens},
                      {"module_compute_ms", computeMs},
                      {"model_b", k.modules ? k.modules->modelFingerprint : ""},
                      {"file_bytes", fs::file_size(str(p.value("out")))}};
    if (p.isSet("json"))
        std::printf("%s\n", out.dump(2).c_str());
    else
        std::printf("wrote %s: %zu nodes, %zu modules (%lld tokens, %.0f ms of model B)\n",
                    str(p.value("out")).c_str(), k.graph.size(),
                    k.modules ? k.modules->modules.size() : size_t(0), (long long)tokens, computeMs);
    return 0;
}

int show(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"node", "The node to show (default: a summary of the file).", "ID"});
    p.addOption({"verify", "Verify that TEXT is a request about --node (graph verification).", "TEXT"});
    p.addOption({"ttl-hours", "Modules older than this are stale (default: no expiry).", "H"});
    p.addOption({"model-b", "Model B in use now: modules of other weights are stale.", "PATH"});
    p.addOption(
        {"trace",
         "The path a question takes: recall's candidates (lexical embedder), each one's verification, "
         "the chosen node's module freshness.",
         "QUESTION"});
    p.addOption({"profiles", "With --trace: profiles, for --user's instruction line.", "P.json"});
    p.addOption({"user", "With --trace: the asking user.", "ID"});
    p.addOption({"candidates", "With --trace: nodes recall proposes (default 3).", "N", "3"});
    parse(p, args,
          "Show a knowledge graph file, one node with its neighbours, module and freshness, verify a "
          "request text against a node, or trace a question through the graph (JSON).",
          "GRAPH.h5", "The knowledge graph file.");
    const auto pos = p.positionalArguments();
    if (pos.size() != 1)
        throw UsageError{"expected exactly one GRAPH.h5"};
    if (p.isSet("verify") && !p.isSet("node"))
        throw UsageError{"--verify needs --node"};
    if (p.isSet("trace") && (p.isSet("node") || p.isSet("verify")))
        throw UsageError{"--trace follows a question through the whole graph: no --node or --verify"};
    const auto k = core::loadKnowledge(str(pos.first()), false);
    const int64_t now = core::unixMsNow();
    const int64_t ttlMs =
        p.isSet("ttl-hours") ? int64_t(doubleOption(p, "ttl-hours", 0, 0, 1e7) * 3600e3) : 0;
    const std::string current = p.isSet("model-b")
                                    ? core::Checkpoint::open(str(p.value("model-b"))).fingerprint()
                                : k.modules ? k.modules->modelFingerprint
                                            : std::string();
    if (p.isSet("trace")) {
        std::optional<core::UserProfile> profile;
        if (p.isSet("profiles") && p.isSet("user"))
            for (const auto &u : core::readProfiles(str(p.value("profiles"))))
                if (u.user == str(p.value("user")))
                    profile = u;
        core::LexicalEmbedder embedder;
        const auto t =
            jobs::traceKnowledge(k, embedder, str(p.value("trace")), intOption(p, "candidates", 3, 1, 64),
                                 0.3, current, now, ttlMs, profile);
        json cands = json::array();
        for (const auto &c : t.candidates)
            cands.push_back({{"node", c.node},
                             {"name", c.name},
                             {"similarity", c.similarity},
                             {"matched", c.matched},
                             {"accepted", c.accepted},
                             {"reason", c.reason}});
        const json out = {{"question", str(p.value("trace"))},
                          {"candidates", cands},
                          {"chosen", t.chosen},
                          {"freshness", t.freshness},
                          {"module_tokens", t.moduleTokens},
                          {"profile_line", t.profileLine},
                          {"recall_ms", t.recallMs},
                          {"verify_ms", t.verifyMs}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    const auto freshnessOf = [&](const std::string &node) {
        const auto *m = k.modules ? k.modules->find(node) : nullptr;
        return core::moduleFreshness(m != nullptr, m ? m->builtMs : 0,
                                     k.modules ? k.modules->modelFingerprint : "", current, now, ttlMs);
    };
    if (!p.isSet("node")) {
        json freshness = {{"fresh", 0}, {"stale", 0}, {"missing", 0}};
        for (const auto &n : k.graph.nodes()) {
            const char *f = core::freshnessName(freshnessOf(n.id));
            freshness[f] = freshness[f].get<int>() + 1;
        }
        const json out = {{"file", str(pos.first())},
                          {"description", k.description},
                          {"created_utc", k.createdUtc},
                          {"nodes", k.graph.size()},
                          {"freshness", freshness},
                          {"modules", k.modules ? k.modules->modules.size() : 0},
                          {"model_b", k.modules ? k.modules->modelFingerprint : ""}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    const std::string id = str(p.value("node"));
    const auto *n = k.graph.find(id);
    if (!n)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          fmt::format("{}: no node '{}' ({} nodes)", str(pos.first()), id, k.graph.size()));
    json out;
    if (p.isSet("verify")) {
        const auto v = k.graph.verify(id, str(p.value("verify")));
        out = {{"node", id},
               {"text", str(p.value("verify"))},
               {"accepted", v.accepted},
               {"mentioned", v.mentioned},
               {"matched", v.matched},
               {"reason", v.reason}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    json related = json::array();
    for (const auto &r : n->related) {
        const auto *t = k.graph.find(r.target);
        related.push_back(
            {{"kind", core::relationKindName(r.kind)}, {"id", r.target}, {"name", t ? t->name : ""}});
    }
    const auto *m = k.modules ? k.modules->find(id) : nullptr;
    const auto f = freshnessOf(id);
    out = {{"id", n->id},
           {"name", n->name},
           {"synonyms", n->synonyms},
           {"knowledge", n->knowledge},
           {"source", n->source},
           {"confidence", n->confidence},
           {"verified_ms", n->verifiedMs},
           {"reuse_count", n->reuseCount},
           {"questions", n->questions},
           {"related", related},
           {"module_tokens", m ? m->ids.size() : 0},
           {"module_compute_ms", m ? m->computeMs : 0.0},
           {"freshness", core::freshnessName(f)}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
}

// How far a module placed behind another context is from computing its text there: per node, B's
// next-token distribution after [context + module + "Q: question\nA:"] with the module placed
// (boundary recomputation 0, 4, ...) against computing the whole sequence, and, for scale, against
// the same prompt without the module.
int placement(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model-b", "Model B (the one whose modules the graph holds).", "PATH"});
    p.addOption(
        {"context", "Text the modules are placed behind (default: a one-line system prompt).", "TEXT"});
    p.addOption({"limit", "At most N nodes with modules, in file order (default 100).", "N", "100"});
    p.addOption(
        {"boundary", "Boundary tokens recomputed, comma-separated (default 0,4,16).", "LIST", "0,4,16"});
    p.addOption({"json", "Print the table as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Measure module placement: the next-token KL between a module placed behind another context (with "
          "boundary recomputation) and computing the text there, per node, with the no-module KL for scale.",
          "GRAPH.h5", "The knowledge graph file (built with --model-b).");
    const auto pos = p.positionalArguments();
    if (pos.size() != 1)
        throw UsageError{"expected exactly one GRAPH.h5"};
    if (!p.isSet("model-b"))
        throw UsageError{"--model-b is required"};
    const std::vector<int> boundaries = parseIdList(p.value("boundary"), "--boundary");
    for (int b : boundaries)
        if (b < 0)
            throw UsageError{"--boundary expects non-negative token counts"};
    const int limit = intOption(p, "limit", 100, 1);
    const auto k = core::loadKnowledge(str(pos.first()));
    if (!k.modules)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          str(pos.first()) +
                              ": no modules (built with --no-modules); build it with --model-b");
    const auto ck = core::Checkpoint::open(str(p.value("model-b")));
    if (ck.fingerprint() != k.modules->modelFingerprint)
        throw core::Error(core::ErrorCode::Config,
                          fmt::format("{}: the modules were computed by weights {}; {} has {}",
                                      str(pos.first()), k.modules->modelFingerprint, ck.path().string(),
                                      ck.fingerprint()));
    auto model = gpu::Model::load(ck, loadOptions(p));
    const auto tok = loadModelTokenizer(*model);
    const std::string context = p.isSet("context")
                                    ? str(p.value("context"))
                                    : std::string("You answer questions about words and the "
                                                  "things they name, briefly and correctly.\n\n");
    const auto contextIds = tok->encode(context, true);
    struct Column
    {
        std::vector<double> kl;
        int top1 = 0;
    };
    std::vector<Column> cols(boundaries.size());
    Column none;
    int nodes = 0;
    InterruptScope ctrlC;
    for (const auto &mod : k.modules->modules) {
        if (nodes >= limit || InterruptScope::interrupted())
            break;
        const auto *n = k.graph.find(mod.nodeId);
        const std::string question = n->questions.empty() ? "What is " + n->name + "?" : n->questions.front();
        const auto tail = tok->encode(core::promptFor(question), false);
        std::vector<int> all = contextIds;
        all.insert(all.end(), mod.ids.begin(), mod.ids.end());
        all.insert(all.end(), tail.begin(), tail.end());
        if (int(all.size()) > model->contextLimit())
            continue;
        auto truthCache = model->newCache();
        const auto truth = model->forward(all, truthCache);
        const auto argmax = [](const std::vector<float> &v) {
            return std::max_element(v.begin(), v.end()) - v.begin();
        };
        for (size_t i = 0; i < boundaries.size(); ++i) {
            auto cache = model->newCache();
            model->forward(contextIds, cache);
            gpu::placeModule(*model, cache, mod, std::min<int>(boundaries[i], int(mod.ids.size())));
            const auto got = model->forward(tail, cache);
            const double kl = core::klDivergence(truth, got);
            if (!std::isfinite(kl)) // a module of NaN or Inf values: an error, not "kl_mean": null
                throw core::Error(
                    core::ErrorCode::Format,
                    fmt::format("{}: node '{}' (id {}): its placed KV module gives a non-finite "
                                "KL to recomputing the text; the module holds NaN or Inf values",
                                str(pos.first()), n->name, mod.nodeId));
            cols[i].kl.push_back(kl);
            cols[i].top1 += argmax(truth) == argmax(got) ? 1 : 0;
        }
        auto bare = model->newCache();
        std::vector<int> plain = contextIds;
        plain.insert(plain.end(), tail.begin(), tail.end());
        const auto without = model->forward(plain, bare);
        none.kl.push_back(core::klDivergence(truth, without));
        none.top1 += argmax(truth) == argmax(without) ? 1 : 0;
        ++nodes;
    }
    if (nodes == 0)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          str(pos.first()) + ": no module fits the model's context");
    const auto median = [](const std::vector<double> &v) { return core::percentile(v, 50); };
    const auto mean = [](const std::vector<double> &v) {
        double s = 0;
        for (double x : v)
            s += x;
        return s / double(v.size());
    };
    json rows = json::array();
    for (size_t i = 0; i < boundaries.size(); ++i)
        rows.push_back({{"boundary", boundaries[i]},
                        {"kl_mean", mean(cols[i].kl)},
                        {"kl_median", median(cols[i].kl)},
                        {"top1_agreement", double(cols[i].top1) / nodes}});
    const json out = {{"graph", str(pos.first())},
                      {"nodes", nodes},
                      {"context_tokens", contextIds.size()},
                      {"module_prefix_tokens", k.modules->prefixIds.size()},
                      {"placed", rows},
                      {"without_module",
                       {{"kl_mean", mean(none.kl)},
                        {"kl_median", median(none.kl)},
                        {"top1_agreement", double(none.top1) / nodes}}}};
    if (p.isSet("json")) {
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf("%d nodes; modules computed after %zu tokens, placed behind %zu\n\n", nodes,
                k.modules->prefixIds.size(), contextIds.size());
    std::printf("| module | KL mean | KL median | top-1 agreement |\n|:--|--:|--:|--:|\n");
    for (const auto &r : rows)
        std::printf("| placed, %d boundary tokens recomputed | %.4f | %.4f | %.3f |\n",
                    r["boundary"].get<int>(), r["kl_mean"].get<double>(), r["kl_median"].get<double>(),
                    r["top1_agreement"].get<double>());
    std::printf("| none (the question without the knowledge) | %.4f | %.4f | %.3f |\n", mean(none.kl),
                median(none.kl), double(none.top1) / nodes);
    return 0;
}

int profiles(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"workload", "The workload whose users get a profile (JSONL).", "W.jsonl"});
    p.addOption({"out", "The profiles file to write (JSON, replaced whole).", "P.json"});
    addForceOption(p);
    addSeedOption(p, "Random seed; the same users and seed give the same profiles");
    parse(
        p, args,
        "Write one profile per user of a workload (verbosity, depth, examples, register), drawn with a seed: "
        "the personalisation layer renders each as an instruction after the knowledge (docs/knowledge.md).");
    if (!p.isSet("workload") || !p.isSet("out"))
        throw UsageError{"--workload and --out are required"};
    outputFileOption(p, "out");
    const uint64_t seed = seedOption(p);
    const auto w = core::readWorkloadJsonl(str(p.value("workload")));
    for (const auto &m : w.warnings.messages())
        std::fprintf(stderr, "warning: %s\n", m.c_str());
    std::vector<std::string> users;
    for (const auto &r : w.requests)
        if (!r.user.empty())
            users.push_back(r.user);
    if (users.empty())
        throw core::Error(core::ErrorCode::InvalidArgument,
                          str(p.value("workload")) + ": no request names a user (field 'user')");
    const auto ps = core::generateProfiles(users, seed);
    core::writeFileAtomic(str(p.value("out")), core::profilesToJson(ps, seed));
    std::printf("wrote %s: %zu profiles for %zu requests\n", str(p.value("out")).c_str(), ps.size(),
                w.requests.size());
    return 0;
}

int corpus(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption(
        {"out", "The training documents to write (JSONL: text, split, prompt, answer).", "OUT.jsonl"});
    addForceOption(p);
    p.addOption({"concepts", "The N most popular WordNet concepts (default 1000).", "N", "1000"});
    p.addOption({"wordnet-dir",
                 QString("WordNet database directory (default %1).").arg(core::WordNet::kDefaultDir), "DIR",
                 core::WordNet::kDefaultDir});
    p.addOption({"workload", "Take the system prompts of this workload's requests as contexts.", "W.jsonl"});
    p.addOption({"per-node", "Documents per concept (default 4).", "N", "4"});
    addSeedOption(p, "Random seed");
    parse(p, args,
          "Write training documents that teach a model to render a concept's knowledge for a user profile: "
          "[system prompt] [knowledge] [profile instruction] Q: question / A: the answer written for the "
          "profile (docs/knowledge.md, \"Personalisation\"). Mix them into a corpus for kvwb train.");
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    outputFileOption(p, "out");
    const int count = intOption(p, "concepts", 1000, 1, 100000);
    const int perNode = intOption(p, "per-node", 4, 1, 1000);
    const uint64_t seed = seedOption(p);
    std::vector<std::string> systems;
    if (p.isSet("workload")) {
        const auto w = core::readWorkloadJsonl(str(p.value("workload")));
        for (const auto &m : w.warnings.messages())
            std::fprintf(stderr, "warning: %s\n", m.c_str());
        for (const auto &r : w.requests) {
            auto head = core::promptHead(r.prompt, r.question);
            if (head && head->size() > 2 && head->substr(head->size() - 2) == "\n\n") {
                head->resize(head->size() - 2);
                if (std::find(systems.begin(), systems.end(), *head) == systems.end())
                    systems.push_back(*head);
            }
        }
    }
    const auto wn = core::WordNet::load(str(p.value("wordnet-dir")));
    const auto graph = core::graphFromWordNet(wn, size_t(count), core::unixMsNow());
    const auto docs = core::personalisedCorpus(graph, systems, perNode, seed);
    std::string out;
    for (const auto &d : docs)
        out += json{{"synset", d.nodeId}, {"split", d.split},   {"template", "personal"},
                    {"prompt", d.prompt}, {"answer", d.answer}, {"text", d.prompt + " " + d.answer + "\n"}}
                   .dump() +
               "\n";
    core::writeFileAtomic(str(p.value("out")), out);
    std::printf("wrote %s: %zu documents for %zu concepts, %zu system prompts\n", str(p.value("out")).c_str(),
                docs.size(), graph.size(), systems.size());
    return 0;
}

int evaluate(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"workload", "Workload JSONL; its model-b requests are evaluated.", "W.jsonl"});
    p.addOption({"model-a", "Model a (the model embedder's, and the replay's model a).", "PATH"});
    p.addOption({"model-b", "Model B, whose modules the graph holds.", "PATH"});
    p.addOption({"knowledge", "The graph (GRAPH.h5 or TENANT=GRAPH.h5; repeatable).", "SPEC"});
    p.addOption({"profiles", "User profiles (kvwb knowledge profiles).", "P.json"});
    p.addOption({"limit", "Only the first N requests of the workload.", "N"});
    p.addOption({"max-tokens", "Override every request's max_tokens.", "N"});
    p.addOption({"threshold", "Semantic cosine threshold (default 0.8).", "T", "0.8"});
    p.addOption(
        {"embedder",
         "lexical (default), lexical-idf, model (model A's hidden states) or an embedding model's path.", "E",
         "lexical"});
    p.addOption({"knowledge-candidates", "Nodes recall proposes (default 3).", "N", "3"});
    p.addOption({"knowledge-min-similarity", "Recall's cosine floor (default 0.3).", "S", "0.3"});
    p.addOption({"no-verify", "Take recall's best node without graph verification."});
    p.addOption({"knowledge-boundary", "Module tokens recomputed in place (default 0).", "N", "0"});
    p.addOption({"price-in", "USD per 1M prompt tokens computed (default 0.15).", "USD", "0.15"});
    p.addOption({"price-out", "USD per 1M generated tokens computed (default 0.60).", "USD", "0.60"});
    p.addOption({"ledger-dir", "Write each arm's ledger (CSV) and the per-request answers here.", "DIR"});
    addForceOption(p);
    p.addOption(
        {"experiment", "With --save: the experiment file the arms' ledgers are stored in.", "EXP.h5"});
    p.addOption({"save",
                 "Store each arm's ledger as /ledgers/NAME.<arm> of --experiment, with the evaluation in its "
                 "settings (the report's Knowledge reuse section).",
                 "NAME"});
    p.addOption({"json", "Print JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Answer a workload's model-B requests four ways - no cache, a semantic cache, the knowledge tier, "
          "and the knowledge tier's text computed from scratch - and report quality (against the reference "
          "answer and each other), profile fit, false hits, tokens, time, cost, the graph's build cost, "
          "the break-even reuse per node and where the knowledge tier's time goes.");
    if (!p.isSet("workload") || !p.isSet("model-a") || !p.isSet("model-b") || !p.isSet("knowledge"))
        throw UsageError{"--workload, --model-a, --model-b and --knowledge are required"};
    checkEmbedderOption(p);
    core::ReplaySettings job;
    job.workload = str(p.value("workload"));
    job.limit = p.isSet("limit") ? intOption(p, "limit", 0, 1) : 0;
    job.embedder = str(p.value("embedder"));
    for (const QString &g : p.values("knowledge"))
        job.knowledgeGraphs.push_back(str(g));
    job.profiles = str(p.value("profiles"));
    job.knowledge.candidates = intOption(p, "knowledge-candidates", 3, 1, 64);
    job.knowledge.minSimilarity = doubleOption(p, "knowledge-min-similarity", 0.3, -1.0, 1.0);
    job.knowledge.verify = !p.isSet("no-verify");
    job.knowledge.boundary = intOption(p, "knowledge-boundary", 0, 0);
    job.threshold = doubleOption(p, "threshold", 0.8, -1.0, 1.0);
    job.maxTokens = p.isSet("max-tokens") ? intOption(p, "max-tokens", 0, 1) : 0;
    job.priceIn = doubleOption(p, "price-in", 0.15, 0.0, 1e9);
    job.priceOut = doubleOption(p, "price-out", 0.60, 0.0, 1e9);
    if (p.isSet("save") != p.isSet("experiment"))
        throw UsageError{"--save and --experiment go together"};
    if (p.isSet("save"))
        core::checkWritableOutput(str(p.value("experiment")), "--experiment");
    const fs::path ledgerDir = p.isSet("ledger-dir") ? outputDirectoryOption(p, "ledger-dir") : fs::path();
    if (!ledgerDir.empty())
        core::startOutputDirectory(ledgerDir);
    const auto lo = loadOptions(p);
    auto a = gpu::Model::load(str(p.value("model-a")), lo);
    auto b = gpu::Model::load(str(p.value("model-b")), lo);
    const auto tokA = loadModelTokenizer(*a), tokB = loadModelTokenizer(*b);
    const bool asJson = p.isSet("json");
    InterruptScope ctrlC;
    const auto e = jobs::evaluateKnowledge(
        job, *a, *b, *tokA, *tokB, [&](const std::string &stage, int done, int total) {
            if (!asJson && (done % 25 == 0 || done == total))
                std::fprintf(stderr, "\r%s: %d/%d requests%s", stage.c_str(), done, total,
                             done == total ? "\n" : "");
            return !InterruptScope::interrupted();
        });
    for (const auto &w : e.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (e.cancelled) {
        std::fprintf(stderr, "interrupted: no result\n");
        return 130;
    }
    if (!ledgerDir.empty()) {
        std::string answers = "request_id,arm,answer\n";
        for (const auto &arm : e.arms) {
            core::writeLedgerCsv(ledgerDir / (jobs::armSlug(arm.name) + ".csv"), arm.rows);
            for (size_t i = 0; i < arm.rows.size() && i < arm.outputs.size(); ++i) {
                std::string text = arm.outputs[i];
                for (size_t at = text.find('"'); at != std::string::npos; at = text.find('"', at + 2))
                    text.insert(at, 1, '"');
                answers += fmt::format("{},{},\"{}\"\n", arm.rows[i].requestId, arm.name, text);
            }
        }
        core::writeFileAtomic(ledgerDir / "answers.csv", answers);
    }
    if (p.isSet("save"))
        jobs::saveKnowledgeEvaluation(str(p.value("experiment")), str(p.value("save")), job, e);
    std::printf("%s\n", asJson ? jobs::knowledgeEvaluationJson(e).c_str()
                               : jobs::knowledgeEvaluationMarkdown(e).c_str());
    return 0;
}

} // namespace

int cmdKnowledge(const QStringList &args)
{
    const bool action =
        args.size() >= 2 && (args[1] == "build" || args[1] == "show" || args[1] == "profiles" ||
                             args[1] == "placement" || args[1] == "corpus" || args[1] == "evaluate");
    if (!action) {
        if (args.size() >= 2 && (args[1] == "--help" || args[1] == "-h")) {
            std::printf(
                "Usage: kvwb knowledge build|show|profiles|placement|corpus|evaluate [options]\n\n"
                "  build      Build a knowledge graph file (kvwb knowledge build --help)\n"
                "  show       Show a node, its neighbours, module and freshness, or verify a request\n"
                "  profiles   Write one profile per user of a workload\n"
                "  placement  Measure modules placed behind another context\n"
                "  corpus     Write training documents for a personalised model\n"
                "  evaluate   Quality and economics: no cache, semantic cache, knowledge tier\n"
                "Each action has --help.\n");
            return 0;
        }
        throw UsageError{"expected an action: build, show, profiles, placement, corpus or evaluate (kvwb "
                         "knowledge --help)"};
    }
    QStringList rest = args;
    rest.removeAt(1); // the action; args[0] stays the program name for the parser
    if (args[1] == "build")
        return build(rest);
    if (args[1] == "show")
        return show(rest);
    if (args[1] == "corpus")
        return corpus(rest);
    if (args[1] == "evaluate")
        return evaluate(rest);
    return args[1] == "profiles" ? profiles(rest) : placement(rest);
}

} // namespace kvwb::app
