#include "app/cli/cli_semantic.h"

#include "gpu/model/cross_encoder.h"
#include "gpu/model/encoder.h"

#include "app/cli/cli_util.h"
#include "app/cli/engine_options.h"
#include "app/jobs/replay_job.h"
#include "core/cache/semantic_sweep.h"
#include "core/util/error.h"
#include "gpu/model/model.h"

#include <QCommandLineParser>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <optional>

namespace kvwb::app {

using namespace kvwb::app::cli;
using nlohmann::json;

int cmdSweepSemantic(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"workload", "A workload with intent labels (kvwb workload wordnet | quora).", "W.jsonl"});
    p.addOption(
        {"embedder",
         "lexical (default), lexical-idf, model (model A's hidden states) or an embedding model's path "
         "(sentence-transformers directory, bert GGUF, or a decoder embedder).",
         "E", "lexical"});
    p.addOption({"model-a", "Model A, for --embedder model.", "PATH"});
    p.addOption({"embedder-layer", "Model embedder layer (default: the middle one).", "N"});
    p.addOption({"embed", "question (default) or prompt: what the tier embeds.", "WHAT", "question"});
    p.addOption(
        {"target", "The false-hit rate the chosen threshold must stay under (default 0.1).", "F", "0.1"});
    p.addOption(
        {"include-exact", "Also score requests whose text repeats an earlier one (the exact tier's)."});
    p.addOption({"limit", "Only the first N requests.", "N"});
    p.addOption({"embedder-prefix",
                 "An embedding model's input prefix, put before every text it embeds (e5: \"query: \").",
                 "TEXT"});
    p.addOption({"verifier",
                 "A cross-encoder verifier (kvwb train-verifier, or a BertForSequenceClassification "
                 "directory): also sweep its threshold over the candidates at --threshold.",
                 "DIR"});
    p.addOption({"threshold",
                 "With --verifier: the similarity threshold whose candidates the verifier judges (default "
                 "0.8, the replay's).",
                 "T", "0.8"});
    p.addOption({"json", "Print the sweep as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Precision, recall and false-hit rate of the semantic tier against its threshold on a labelled "
          "workload, and the threshold that meets a target false-hit rate.");
    if (!p.isSet("workload"))
        throw UsageError{"--workload is required"};
    const std::string kind = str(p.value("embedder"));
    checkEmbedderOption(p, true);
    if (kind == "model" && !p.isSet("model-a"))
        throw UsageError{"--embedder model needs --model-a"};
    if (p.value("embed") != "question" && p.value("embed") != "prompt")
        throw UsageError{"--embed expects question or prompt"};
    const double target = doubleOption(p, "target", 0.1, 0.0, 1.0);
    if (p.isSet("threshold") && !p.isSet("verifier"))
        throw UsageError{"--threshold sets the verifier's candidates: it needs --verifier"};
    const double similarityThreshold = doubleOption(p, "threshold", 0.8, -1.0, 1.0);
    const auto read = jobs::readReplayRequests(str(p.value("workload")),
                                               p.isSet("limit") ? intOption(p, "limit", 0, 1) : 0);
    std::vector<core::LabelledText> texts;
    std::vector<std::string> documents;
    for (const auto &r : read.requests) {
        texts.push_back({r.tenant,
                         p.value("embed") == "question" && !r.question.empty() ? r.question : r.prompt,
                         r.intent});
        documents.push_back(texts.back().text);
    }
    std::unique_ptr<gpu::Model> model;
    std::unique_ptr<core::Tokenizer> tokenizer;
    std::unique_ptr<core::Embedder> embedder;
    if (kind == "model") {
        model = gpu::Model::load(str(p.value("model-a")), loadOptions(p));
        tokenizer = loadModelTokenizer(*model);
        embedder = jobs::makeEmbedder(kind, intOption(p, "embedder-layer", -1, 0), *model, *tokenizer);
    } else if (!core::isBuiltinEmbedder(kind)) {
        embedder = gpu::loadEmbedderModel(kind, loadOptions(p), str(p.value("embedder-prefix")));
    } else {
        auto lexical = std::make_unique<core::LexicalEmbedder>();
        if (kind == "lexical-idf")
            lexical->fitIdf(documents);
        embedder = std::move(lexical);
    }
    const core::SemanticSweep s = core::sweepSemantic(texts, *embedder, target, {}, p.isSet("include-exact"));
    if (s.scored == 0)
        throw core::Error(core::ErrorCode::Format,
                          str(p.value("workload")) +
                              ": no labelled request has an earlier one of its tenant to match");
    std::optional<core::VerifierSweep> vs;
    std::string verifierName;
    if (p.isSet("verifier")) {
        gpu::CrossEncoder verifier(str(p.value("verifier")), loadOptions(p));
        verifierName = verifier.name();
        vs = core::sweepVerifier(texts, s, verifier, similarityThreshold, target);
    }
    const auto pointJson = [](const core::SweepPoint &pt) {
        return json{{"threshold", pt.threshold}, {"hits", pt.hits},     {"correct_hits", pt.correctHits},
                    {"precision", pt.precision}, {"recall", pt.recall}, {"false_hit_rate", pt.falseHitRate}};
    };
    if (p.isSet("json")) {
        json points = json::array();
        for (const auto &pt : s.points)
            points.push_back(pointJson(pt));
        json at;
        if (s.atTarget)
            at = pointJson(*s.atTarget);
        json out = {{"workload", str(p.value("workload"))},
                    {"embedder", embedder->name()},
                    {"scored", s.scored},
                    {"should_hit", s.shouldHit},
                    {"exact_skipped", s.exactSkipped},
                    {"target_false_hit_rate", target},
                    {"at_target", at},
                    {"points", points}};
        if (vs) {
            json vpoints = json::array();
            for (const auto &pt : vs->points)
                vpoints.push_back(pointJson(pt));
            out["verifier"] = {{"name", verifierName},
                               {"similarity_threshold", vs->similarityThreshold},
                               {"candidates", vs->candidates},
                               {"correct_candidates", vs->correctCandidates},
                               {"errors", vs->errors},
                               {"mean_ms", vs->meanMs},
                               {"at_target", vs->atTarget ? pointJson(*vs->atTarget) : json()},
                               {"points", vpoints}};
        }
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf("%s, embedder %s: %lld labelled requests scored (%lld with an earlier duplicate), %lld exact "
                "repeats left to the exact tier\n\n",
                str(p.value("workload")).c_str(), embedder->name().c_str(), (long long)s.scored,
                (long long)s.shouldHit, (long long)s.exactSkipped);
    std::printf("| threshold | hits | precision | recall | false-hit rate |\n|--:|--:|--:|--:|--:|\n");
    for (const auto &pt : s.points)
        if (int(std::lround(pt.threshold * 100)) % 5 == 0)
            std::printf("| %.2f | %lld | %.3f | %.3f | %.3f |\n", pt.threshold, (long long)pt.hits,
                        pt.precision, pt.recall, pt.falseHitRate);
    if (s.atTarget)
        std::printf("\nthreshold for a false-hit rate <= %.3f: %.2f (precision %.3f, recall %.3f)\n", target,
                    s.atTarget->threshold, s.atTarget->precision, s.atTarget->recall);
    else
        std::printf("\nno threshold of 0.50..0.99 keeps the false-hit rate <= %.3f\n", target);
    if (vs) {
        std::printf("\nverifier %s on the %lld candidates at similarity >= %.2f (%lld of them right, %lld "
                    "without a score; %.2f ms a pair):\n\n",
                    verifierName.c_str(), (long long)vs->candidates, vs->similarityThreshold,
                    (long long)vs->correctCandidates, (long long)vs->errors, vs->meanMs);
        std::printf(
            "| verifier threshold | hits | precision | recall | false-hit rate |\n|--:|--:|--:|--:|--:|\n");
        for (const auto &pt : vs->points)
            if (int(std::lround(pt.threshold * 100)) % 10 == 0 ||
                (vs->atTarget && pt.threshold == vs->atTarget->threshold))
                std::printf("| %.2f | %lld | %.3f | %.3f | %.3f |\n", pt.threshold, (long long)pt.hits,
                            pt.precision, pt.recall, pt.falseHitRate);
        if (vs->atTarget)
            std::printf(
                "\nverifier threshold for a false-hit rate <= %.3f: %.2f (precision %.3f, recall %.3f)\n",
                target, vs->atTarget->threshold, vs->atTarget->precision, vs->atTarget->recall);
        else
            std::printf("\nno verifier threshold keeps the false-hit rate <= %.3f at similarity %.2f\n",
                        target, vs->similarityThreshold);
    }
    return 0;
}

} // namespace kvwb::app
