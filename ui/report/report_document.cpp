#include "ui/report/report_document.h"

#include "core/ledger/prices.h"
#include "core/metrics/bootstrap.h"
#include "core/util/error.h"
#include "ui/report/report_comparison.h"
#include "ui/report/report_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include <utility>

namespace kvwb::ui::report {

namespace {

struct Block
{
    enum Kind
    {
        Heading,
        Para,
        Table,
        Chart,
        Code,
        Comparison
    } kind = Para;
    int level = 2;
    std::string text;
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    const ReportChart *chart = nullptr;
    const core::ComparisonSample *sample = nullptr; // Comparison blocks
};

struct Doc
{
    std::vector<Block> blocks;
    Block &add(Block::Kind kind)
    {
        blocks.emplace_back();
        blocks.back().kind = kind;
        return blocks.back();
    }
    void heading(int level, std::string text)
    {
        Block &b = add(Block::Heading);
        b.level = level;
        b.text = std::move(text);
    }
    void para(std::string text) { add(Block::Para).text = std::move(text); }
    void code(std::string text) { add(Block::Code).text = std::move(text); }
    void table(std::vector<std::string> header, std::vector<std::vector<std::string>> rows)
    {
        Block &b = add(Block::Table);
        b.header = std::move(header);
        b.rows = std::move(rows);
    }
    void chart(const ReportChart &c) { add(Block::Chart).chart = &c; }
    void comparison(const core::ComparisonSample &sample) { add(Block::Comparison).sample = &sample; }
    void metricTable(const core::MetricTable &t)
    {
        std::vector<std::vector<std::string>> rows;
        for (const auto &r : t.rows) {
            std::vector<std::string> cells;
            for (double v : r)
                cells.push_back(shown(v));
            rows.push_back(std::move(cells));
        }
        table(t.columns, std::move(rows));
    }
    void matrixTable(const core::Matrix &m)
    {
        std::vector<std::string> header{"B \\ A"};
        for (int c = 0; c < m.cols; ++c)
            header.push_back(std::to_string(c));
        std::vector<std::vector<std::string>> rows;
        for (int r = 0; r < m.rows; ++r) {
            std::vector<std::string> cells{std::to_string(r)};
            for (int c = 0; c < m.cols; ++c)
                cells.push_back(fmt::format("{:.3f}", m.data[size_t(r) * size_t(m.cols) + size_t(c)]));
            rows.push_back(std::move(cells));
        }
        table(std::move(header), std::move(rows));
    }
};

void addCharts(Doc &doc, const std::vector<ReportChart> &charts, const std::string &prefix)
{
    for (const auto &c : charts)
        if (c.id.rfind(prefix, 0) == 0)
            doc.chart(c);
}

// A JSON value flattened into rows of a setting table: nested objects as dotted keys, arrays of
// plain values joined with ", ".
void flattenJson(const nlohmann::json &j, const std::string &key, std::vector<std::vector<std::string>> &rows)
{
    if (j.is_object()) {
        for (const auto &[k, v] : j.items())
            flattenJson(v, key.empty() ? k : key + "." + k, rows);
        return;
    }
    std::string value;
    if (j.is_array()) {
        bool plain = true;
        for (const auto &v : j)
            plain = plain && !v.is_structured();
        if (!plain) {
            for (size_t i = 0; i < j.size(); ++i)
                flattenJson(j[i], key + "[" + std::to_string(i) + "]", rows);
            return;
        }
        for (const auto &v : j)
            value += (value.empty() ? "" : ", ") + (v.is_string() ? v.get<std::string>() : v.dump());
    } else {
        value = j.is_string() ? j.get<std::string>() : j.dump();
    }
    rows.push_back({key, value.empty() ? "-" : value});
}

// Settings JSON as a two-column table (or a paragraph when it is not JSON).
void settingsTable(Doc &doc, const std::string &json)
{
    if (json.empty())
        return;
    if (!nlohmann::json::accept(json)) {
        doc.para("Settings: " + json);
        return;
    }
    std::vector<std::vector<std::string>> rows;
    flattenJson(nlohmann::json::parse(json), {}, rows);
    if (!rows.empty())
        doc.table({"setting", "value"}, std::move(rows));
}

// Whether a ledger's replay was stopped before its workload's end (its settings say "cancelled").
bool partialLedger(const ReportLedger &l)
{
    if (l.settingsJson.empty() || !nlohmann::json::accept(l.settingsJson))
        return false;
    const auto j = nlohmann::json::parse(l.settingsJson);
    return j.is_object() && j.value("cancelled", false);
}

double meanColumn(const core::MetricTable &t, const char *name)
{
    const int c = t.column(name);
    double sum = 0;
    int n = 0;
    for (const auto &r : t.rows)
        if (c >= 0 && size_t(c) < r.size() && std::isfinite(r[size_t(c)]))
            sum += r[size_t(c)], ++n;
    return n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

// Page one: what a reader wants first - the pair, each converter with the share of the no-prefix
// KL gap it closed (with its interval over the compared prompts), and each replay's savings and
// false hits. The environment and hashes come last.
void addSummarySection(Doc &doc, const ReportData &d)
{
    doc.heading(2, "Summary");
    std::vector<std::vector<std::string>> rows;
    const auto model = [](const core::ModelInfo &m) {
        const std::string source = std::filesystem::path(m.sourcePath).filename().string();
        return fmt::format("{}, {} layers, {} kv heads of {}{}", m.config.architecture, m.config.numLayers,
                           m.config.numKvHeads, m.config.headDim, source.empty() ? "" : " (" + source + ")");
    };
    rows.push_back({"model A (source)", model(d.modelA)});
    rows.push_back({"model B (target)", model(d.modelB)});
    rows.push_back(
        {"captured", fmt::format("{} prompts ({} tokens of A, {} of B)", d.prompts, d.tokensA, d.tokensB)});
    for (const auto &r : d.converters) {
        std::string text = fmt::format(
            "{}; held-out mean R\u00b2 of keys {}, of values {}, attention cosine {}",
            core::converterFamilyName(r.family), shown(meanColumn(r.layerMetrics, "r2_k")),
            shown(meanColumn(r.layerMetrics, "r2_v")), shown(meanColumn(r.layerMetrics, "attn_cos")));
        std::vector<double> kl, floor;
        for (const auto &c : d.comparisons)
            for (const auto &sample : c.samples)
                if (sample.converter == r.name && std::isfinite(sample.meanKl) &&
                    std::isfinite(sample.klNoPrefix)) {
                    kl.push_back(sample.meanKl);
                    floor.push_back(sample.klNoPrefix);
                }
        if (kl.size() >= 2) {
            try {
                text += fmt::format("; KL gap closed vs no prefix {} over {} compared prompts",
                                    core::formatInterval(core::gapClosed(kl, floor)), kl.size());
            } catch (const core::Error &) {
                // a degenerate set (every floor 0): no interval to give
            }
        } else {
            text += "; no comparison of it stored (kvwb compare --save-samples, or the Compare step)";
        }
        rows.push_back({"converter " + r.name, text});
    }
    for (const auto &l : d.ledgers) {
        const auto &s = l.summary;
        const double saving = s.costUsdNoCache > 0 ? 1 - s.costUsd / s.costUsdNoCache : 0;
        rows.push_back({"replay " + l.name,
                        fmt::format("{}{} requests: hit rate {}, false hits {} ({} of response hits), cost "
                                    "${:.4f} vs ${:.4f} without caching (saving {}), TTFT p50 {} ms",
                                    partialLedger(l) ? "PARTIAL (stopped before the workload's end): " : "",
                                    s.requests, percent(s.hitRate), s.falseHits, percent(s.falseHitRate),
                                    s.costUsd, s.costUsdNoCache, percent(saving), shown(s.ttftMsP50))});
    }
    doc.table({"what", "measured"}, std::move(rows));
}

// The knowledge tier's evaluations (kvwb knowledge evaluate --save NAME): their arms' ledgers carry
// "knowledge_evaluation" and the arm's quality in their settings. One table per evaluation: the
// four arms side by side, then where the knowledge tier's time went and what the graph cost.
void addKnowledgeSection(Doc &doc, const ReportData &d)
{
    std::vector<std::string> names;
    std::vector<std::vector<std::vector<std::string>>> tables;
    std::vector<nlohmann::json> evaluations;
    for (const auto &l : d.ledgers) {
        if (l.settingsJson.empty() || !nlohmann::json::accept(l.settingsJson))
            continue;
        const auto j = nlohmann::json::parse(l.settingsJson);
        if (!j.is_object() || !j.contains("knowledge_evaluation") || !j["knowledge_evaluation"].is_string())
            continue;
        const std::string name = j["knowledge_evaluation"].get<std::string>();
        auto at = std::find(names.begin(), names.end(), name);
        if (at == names.end()) {
            names.push_back(name);
            tables.emplace_back();
            evaluations.push_back(j.value("evaluation", nlohmann::json::object()));
            at = names.end() - 1;
        }
        const auto num = [&](const char *k) {
            return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
        };
        const auto &s = l.summary;
        tables[size_t(at - names.begin())].push_back(
            {j.value("arm", l.name), std::to_string(s.requests), std::to_string(s.hits),
             std::to_string(s.falseHits), std::to_string(s.tokensComputed), std::to_string(s.tokensReused),
             fmt::format("{:.2f}", num("model_s")), fmt::format("{:.6f}", s.costUsd),
             fmt::format("{:.3f}", num("word_f1")), fmt::format("{:.3f}", num("rouge_l")),
             fmt::format("{:.3f}", num("rouge_l_vs_full")), fmt::format("{:.3f}", num("profile_fit"))});
    }
    if (names.empty())
        return;
    doc.heading(2, "Knowledge reuse");
    doc.para("The same model-B requests answered four ways: no cache (B from scratch with the user's profile "
             "line), a semantic response cache (a stored answer, whoever asks), the knowledge tier (the "
             "verified concept node's KV module placed, B rendering the user's answer) and the knowledge "
             "tier's text computed from scratch. Quality is against the concept's reference answer; "
             "\"vs full\" against the last arm's answer; profile fit is the share of answers that fit the "
             "asking user's profile (docs/knowledge.md).");
    for (size_t i = 0; i < names.size(); ++i) {
        doc.heading(3, "Evaluation " + names[i]);
        doc.table({"arm", "requests", "cache answers", "false hits", "tokens computed", "tokens reused",
                   "model s", "cost USD", "word F1", "ROUGE-L", "ROUGE-L vs full", "profile fit"},
                  std::move(tables[i]));
        const auto &e = evaluations[i];
        if (e.contains("time_ms") && e["time_ms"].is_object()) {
            std::vector<std::vector<std::string>> steps;
            for (const auto &[step, ms] : e["time_ms"].items())
                if (ms.is_number())
                    steps.push_back({step, fmt::format("{:.1f}", ms.get<double>())});
            doc.table({"knowledge tier step", "total ms"}, std::move(steps));
        }
        if (e.contains("build") && e.contains("break_even_reuse"))
            doc.para(fmt::format(
                "Graph: {} modules built from {} tokens in {:.0f} ms; break-even reuse per node "
                "{:.2f} (tokens), {:.2f} (time).",
                e["build"].value("modules", 0), e["build"].value("tokens", 0), e["build"].value("ms", 0.0),
                e["break_even_reuse"].value("tokens", 0.0), e["break_even_reuse"].value("ms", 0.0)));
    }
}

// The provenance of the experiment file beside the environment that writes the report.
void addEnvironmentSection(Doc &doc, const ReportData &d)
{
    doc.heading(2, "Environment");
    doc.para("Left: what wrote the experiment file (its provenance). Right: what wrote this report.");
    std::vector<std::vector<std::string>> rows;
    for (const auto &r : environmentRows(d))
        rows.push_back(
            {r.label, r.experiment.value_or("-"), r.reportInDocument ? r.report.value_or("-") : "-"});
    doc.table({"", "experiment file", "this report"}, std::move(rows));
}

// Both models' configurations and fingerprints, then the KV storage.
void addModelsSection(Doc &doc, const ReportData &d)
{
    doc.heading(2, "Models");
    const auto row = [&](const std::string &label, auto get) {
        return std::vector<std::string>{label, get(d.modelA), get(d.modelB)};
    };
    const auto cfgInt = [](auto member) {
        return [member](const core::ModelInfo &m) { return std::to_string(m.config.*member); };
    };
    doc.table({"", "model A (source)", "model B (target)"},
              {row("architecture", [](const core::ModelInfo &m) { return m.config.architecture; }),
               row("model type", [](const core::ModelInfo &m) { return m.config.modelType; }),
               row("layers", cfgInt(&core::ModelConfig::numLayers)),
               row("heads", cfgInt(&core::ModelConfig::numHeads)),
               row("kv heads", cfgInt(&core::ModelConfig::numKvHeads)),
               row("head dim", cfgInt(&core::ModelConfig::headDim)),
               row("hidden size", cfgInt(&core::ModelConfig::hiddenSize)),
               row("vocab size", cfgInt(&core::ModelConfig::vocabSize)),
               row("RoPE",
                   [](const core::ModelInfo &m) {
                       return fmt::format("theta {}, {}, scaling {} x{}", m.config.ropeTheta,
                                          core::ropeLayoutName(m.config.ropeLayout),
                                          m.config.ropeScaling.type, m.config.ropeScaling.factor);
                   }),
               row("captured layers", [](const core::ModelInfo &m) { return joinInts(m.capturedLayers); }),
               row("weights sha256", [](const core::ModelInfo &m) { return m.weightsSha256; }),
               row("tokenizer sha256", [](const core::ModelInfo &m) { return m.tokenizerSha256; }),
               row("source", [](const core::ModelInfo &m) { return m.sourcePath; })});
    doc.table({"storage", "value"}, {{"KV dtype", core::floatTypeName(d.storage.storage)},
                                     {"deflate level", std::to_string(d.storage.compress)},
                                     {"chunk rows", std::to_string(d.storage.chunkTokens)},
                                     {"stored keys", core::keyFormName(d.storage.keyForm)},
                                     {"prompts", std::to_string(d.prompts)},
                                     {"tokens A / B", fmt::format("{} / {}", d.tokensA, d.tokensB)}});
}

// A converter family auto chose: every candidate it fitted with its validation scores, the kept one
// marked (nothing for other converters).
void addAutoChoice(Doc &doc, const core::ConverterRecord &r)
{
    if (r.settingsJson.empty() || !nlohmann::json::accept(r.settingsJson))
        return;
    const auto settings = nlohmann::json::parse(r.settingsJson);
    const auto it = settings.find("auto");
    if (it == settings.end() || !it->is_object() || !it->contains("candidates"))
        return;
    const int chosen = it->value("chosen", -1);
    const auto number = [](const nlohmann::json &c, const char *key, const char *format) {
        const auto v = c.find(key);
        return v != c.end() && v->is_number() ? fmt::format(fmt::runtime(format), v->get<double>())
                                              : std::string("-");
    };
    std::vector<std::vector<std::string>> rows;
    int i = 0;
    for (const auto &c : it->at("candidates")) {
        rows.push_back({(i == chosen ? "kept: " : "") + c.value("family", std::string("?")),
                        fmt::format("{} (k = {}), lambda {}{}", c.value("selection", std::string("?")),
                                    c.value("k", 0), c.value("lambda_mode", std::string("?")),
                                    c.value("token_features", std::string("none")) == "none"
                                        ? std::string()
                                        : ", token features " + c.value("token_features", std::string())),
                        number(c, "valid_kl", "{:.4f}"), number(c, "valid_kl_no_prefix", "{:.4f}"),
                        c.contains("valid_gap_closed") && c["valid_gap_closed"].is_number()
                            ? fmt::format("{:.1f} %", 100 * c["valid_gap_closed"].get<double>())
                            : "-",
                        number(c, "valid_top1", "{:.3f}"), number(c, "fit_seconds", "{:.1f} s")});
        ++i;
    }
    doc.heading(3, "Family choice (auto): the lowest validation KL of B's next-token distributions");
    doc.table({"candidate", "source layers", "validation KL", "no prefix", "gap closed", "top-1", "fit"},
              rows);
    const std::string skipped = it->value("mlp_skipped", std::string());
    if (!skipped.empty())
        doc.para("The MLP was not fitted: " + skipped + ".");
}

// A converter trained with the KL objective: the validation KL of the KV fit it started from and of
// each epoch through B, the kept one marked (nothing for other converters).
void addKlObjective(Doc &doc, const core::ConverterRecord &r)
{
    if (r.settingsJson.empty() || !nlohmann::json::accept(r.settingsJson))
        return;
    const auto settings = nlohmann::json::parse(r.settingsJson);
    const auto it = settings.find("kl");
    if (it == settings.end() || !it->is_object() || !it->contains("history") || !(*it)["history"].is_array())
        return;
    const auto num = [](const nlohmann::json &v, const char *format) {
        return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string("-");
    };
    const auto &k = *it;
    const int best = k.value("best_epoch", -1);
    const auto &train = k.contains("train_history") && k["train_history"].is_array()
                            ? k["train_history"]
                            : nlohmann::json::array();
    std::vector<std::vector<std::string>> rows;
    rows.push_back({best == 0 ? "kept: 0 (the KV fit)" : "0 (the KV fit)", "-",
                    num(k.value("valid_kl_kv_fit", nlohmann::json()), "{:.4f}")});
    for (size_t e = 0; e < k["history"].size(); ++e)
        rows.push_back({(int(e) + 1 == best ? "kept: " : "") + std::to_string(e + 1),
                        e < train.size() ? num(train[e], "{:.4f}") : "-", num(k["history"][e], "{:.4f}")});
    doc.heading(3, "KL objective: the maps trained through model B");
    doc.table({"epoch", "training KL", "validation KL"}, rows);
    doc.para(fmt::format("No prefix: validation KL {}; kept: {} of the gap closed (the KV fit: {}).",
                         num(k.value("valid_kl_no_prefix", nlohmann::json()), "{:.4f}"),
                         k.value("valid_gap_closed", nlohmann::json()).is_number()
                             ? fmt::format("{:.1f} %", 100 * k["valid_gap_closed"].get<double>())
                             : "-",
                         k.value("valid_gap_closed_kv_fit", nlohmann::json()).is_number()
                             ? fmt::format("{:.1f} %", 100 * k["valid_gap_closed_kv_fit"].get<double>())
                             : "-"));
}

// A converter's settings, charts, per-layer and per-head metrics and CKA matrices.
void addConverterSection(Doc &doc, const core::ConverterRecord &r, const std::vector<ReportChart> &charts)
{
    doc.heading(2, "Converter " + r.name);
    doc.table({"setting", "value"},
              {{"family", core::converterFamilyName(r.family)},
               {"parameters", fmt::format("{} ({:.2f} MB as float32)", r.parameterCount(), r.bytes() / 1e6)},
               {"fit time", r.fitSeconds > 0 ? fmt::format("{:.1f} s", r.fitSeconds) : "-"},
               {"conversion per 1k tokens",
                r.convertMsPer1k > 0 ? fmt::format("{:.2f} ms", r.convertMsPer1k) : "-"},
               {"key form", core::keyFormName(r.keyForm)},
               {"source-layer selection", fmt::format("{} (k = {})", r.selection, r.k)},
               {"lambda", r.lambdaMode},
               {"per-head maps asked for", r.perHead ? "yes" : "no"},
               {"train / valid / test prompts", fmt::format("{} / {} / {}", r.trainPrompts.size(),
                                                            r.validPrompts.size(), r.testPrompts.size())},
               {"train tokens", std::to_string(r.trainTokens)},
               {"fitted", fmt::format("{} by kvwb {} ({})", r.createdUtc, r.appVersion, r.gitCommit)}});
    if (!r.settingsJson.empty()) {
        doc.heading(3, "Fit settings");
        settingsTable(doc, r.settingsJson);
    }
    addAutoChoice(doc, r);
    addKlObjective(doc, r);
    addCharts(doc, charts, "converter_" + safeName(r.name) + "_");
    doc.heading(3, "Per-layer metrics (held-out prompts)");
    doc.metricTable(r.layerMetrics);
    if (!r.headMetrics.rows.empty()) {
        doc.heading(3, "Per-head metrics");
        doc.metricTable(r.headMetrics);
    }
    if (r.ckaKeys.rows > 0) {
        doc.heading(3, "Linear CKA of keys (rows: B layers, columns: A layers)");
        doc.matrixTable(r.ckaKeys);
    }
    if (r.ckaValues.rows > 0) {
        doc.heading(3, "Linear CKA of values (rows: B layers, columns: A layers)");
        doc.matrixTable(r.ckaValues);
    }
}

// A replay ledger's summary, its tiers, its charts and its cost under each price preset.
// What stood between a semantic candidate and serving it: the guards, the verifier and the error
// bound, each with what it prevented and what it cost (docs/cache-tiers.md). Only when one was on.
void addSemanticChecks(Doc &doc, const core::LedgerSummary &s)
{
    if (s.guarded == 0 && s.verified == 0 && s.boundServed == 0 && s.guardedBy.empty())
        return;
    doc.heading(3, "Semantic candidates held back");
    doc.para("A candidate above the similarity threshold serves only past the guards (a negation, number, "
             "entity or question word that differs), the verifier (a cross-encoder's score) and, under an "
             "error bound, its entry's evidence. Prevented: a false hit it stopped (the candidate's intent "
             "was another); lost: a right answer it stopped (the same intent); requests without intents "
             "count in neither.");
    std::vector<std::vector<std::string>> rows;
    for (const auto &[guard, n] : s.guardedBy)
        rows.push_back({"guard: " + guard, std::to_string(n), "-", "-"});
    if (s.guarded > 0)
        rows.push_back({"guards, all", std::to_string(s.guarded), std::to_string(s.guardPrevented),
                        std::to_string(s.guardLost)});
    if (s.guardOverruled > 0)
        rows.push_back(
            {"guards overruled by the verifier (served)", std::to_string(s.guardOverruled), "-", "-"});
    if (s.verified > 0) {
        rows.push_back(
            {fmt::format("verifier: judged {}, passed {}, rejected {} ({} failed; {:.2f} ms a pair)",
                         s.verified, s.verifierPassed, s.verifierRejected, s.verifierErrors,
                         s.verifierMeanMs),
             std::to_string(s.verifierRejected + s.verifierErrors), std::to_string(s.verifierPrevented),
             std::to_string(s.verifierLost)});
    }
    if (!rows.empty())
        doc.table({"check", "held back", "false hits prevented", "hits lost"}, std::move(rows));
    if (s.boundServed > 0)
        doc.para(fmt::format("Under the error bound (the settings' error_bound) the semantic tier served {} "
                             "hits, {} of them false ({}).",
                             s.boundServed, s.boundFalse,
                             percent(double(s.boundFalse) / double(s.boundServed))));
}

void addLedgerSection(Doc &doc, const ReportLedger &l, const std::vector<ReportChart> &charts)
{
    const auto &s = l.summary;
    const bool partial = partialLedger(l);
    doc.heading(2, "Replay ledger " + l.name + (partial ? " (partial)" : ""));
    if (partial)
        doc.para(
            fmt::format("PARTIAL: this replay was stopped after {} requests, before the end of its workload; "
                        "its numbers cover those requests only.",
                        s.requests));
    doc.table(
        {"measure", "value"},
        {{"requests", std::to_string(s.requests) +
                          (s.notServed > 0 ? fmt::format(" ({} more not served)", s.notServed) : "")},
         {"hits (any tier)", fmt::format("{} ({})", s.hits, percent(s.hitRate))},
         {"false hits", fmt::format("{} ({} of response hits)", s.falseHits, percent(s.falseHitRate))},
         {"approximate hits (semantic, cross-model, knowledge; never cached again)",
          std::to_string(s.approximateHits)},
         {"tokens reused / computed", fmt::format("{} / {} (token hit rate {})", s.tokensReused,
                                                  s.tokensComputed, percent(s.tokenHitRate))},
         {"TTFT p50 / p95 / p99 (ms)",
          fmt::format("{} / {} / {}", shown(s.ttftMsP50), shown(s.ttftMsP95), shown(s.ttftMsP99))},
         {"total p50 / p95 / p99 (ms)",
          fmt::format("{} / {} / {}", shown(s.totalMsP50), shown(s.totalMsP95), shown(s.totalMsP99))},
         {"cost (USD), with / without cache", fmt::format("{:.6f} / {:.6f}", s.costUsd, s.costUsdNoCache)}});
    std::vector<std::vector<std::string>> tierRows;
    for (const auto &[kind, a] : s.tiers)
        tierRows.push_back({tierLabel(kind), std::to_string(a.requests), std::to_string(a.hits),
                            a.requests ? percent(double(a.hits) / double(a.requests)) : "-",
                            std::to_string(a.falseHits), std::to_string(a.tokensReused),
                            std::to_string(a.tokensComputed), shown(a.ttftMsP50), shown(a.ttftMsP95),
                            shown(a.ttftMsP99)});
    doc.heading(3, "Per tier");
    doc.table({"tier", "requests", "hits", "hit rate", "false hits", "tokens reused", "tokens computed",
               "TTFT p50 ms", "p95", "p99"},
              std::move(tierRows));
    addSemanticChecks(doc, s);
    addCharts(doc, charts, "ledger_" + safeName(l.name) + "_");
    if (!l.settingsJson.empty()) {
        doc.heading(3, "Replay settings");
        settingsTable(doc, l.settingsJson);
    }
    // The same ledger under every built-in price preset (resources/prices.json): providers bill
    // reuse differently (cached input at a fraction, a premium to write, storage per hour, a
    // minimum cacheable prefix), so one ledger saves differently at each.
    std::vector<std::vector<std::string>> priceRows;
    for (const auto &r : core::comparePrices(l.rows, core::builtinPricePresets()))
        priceRows.push_back({r.preset, r.provider + " " + r.model, fmt::format("{:.6f}", r.costUsd),
                             fmt::format("{:.6f}", r.costUsdNoCache), fmt::format("{:.1f}%", r.savingPercent),
                             fmt::format("{:.6f}", r.cost.cachedInputUsd),
                             fmt::format("{:.6f}", r.cost.cacheWriteUsd),
                             fmt::format("{:.6f}", r.cost.storageUsd)});
    doc.heading(3, "Under each price preset");
    doc.para("The ledger's tokens billed at each preset of resources/prices.json (list prices with their "
             "source and date; the self-hosted one projected from GPU-hour price and throughput): computed "
             "prompt tokens at the input or cache-write price, reused ones at the cached-input price, "
             "response hits free (docs/replay.md, \"Prices\").");
    doc.table({"preset", "model", "cost USD", "no cache USD", "saving", "cached input USD", "cache write USD",
               "storage USD"},
              std::move(priceRows));
    doc.para(fmt::format("All {} ledger rows are in csv/ledger_{}.csv and report.json.", l.rows.size(),
                         safeName(l.name)));
}

void addComparisonsSection(Doc &doc, const ReportData &d)
{
    if (d.comparisons.empty())
        return;
    doc.heading(2, "Comparison samples");
    doc.para("Each prompt answered three ways: by model A, by model B from its own prefill (B scratch) "
             "and by model B from A's converted cache (B transfer). The first token where scratch and "
             "transfer differ is marked (bold and underlined in HTML and PDF, between \u00ab and "
             "\u00bb in Markdown). In HTML and PDF each transfer token is shaded by its KL to scratch: "
             "white at 0 nats, red at 2 nats or more. Every field is in csv/comparisons.csv and "
             "report.json.");
    for (const auto &c : d.comparisons) {
        doc.heading(3, fmt::format("Comparison list {} ({} sample(s))", c.name, c.samples.size()));
        for (size_t i = 0; i < c.samples.size(); ++i) {
            doc.heading(4, fmt::format("Sample {}", i));
            doc.comparison(c.samples[i]);
        }
    }
}

Doc buildDoc(const ReportData &d, const std::vector<ReportChart> &charts)
{
    Doc doc;
    doc.heading(1, "KV Workbench report: " + d.experiment.filename().string());
    doc.para(fmt::format(
        "Experiment file {}: {} converter(s), {} sweep(s), {} replay ledger(s), {} comparison "
        "list(s). The environment, the file's provenance and the configuration hash are at "
        "the end.",
        d.experiment.string(), d.converters.size(), d.sweeps.size(), d.ledgers.size(), d.comparisons.size()));
    addSummarySection(doc, d);
    addModelsSection(doc, d);
    for (const auto &r : d.converters)
        addConverterSection(doc, r, charts);
    for (const auto &s : d.sweeps) {
        doc.heading(2, "Sweep " + s.name);
        addCharts(doc, charts, "sweep_" + safeName(s.name) + "_");
        doc.metricTable(s.table);
        settingsTable(doc, s.settingsJson);
    }
    addKnowledgeSection(doc, d);
    for (const auto &l : d.ledgers)
        addLedgerSection(doc, l, charts);
    addComparisonsSection(doc, d);
    if (!d.warnings.empty()) {
        doc.heading(2, "Warnings");
        for (const auto &w : d.warnings)
            doc.para(w);
    }
    addEnvironmentSection(doc, d);
    doc.heading(2, "Configuration");
    doc.para(
        fmt::format("Experiment file {} bytes, schema {}. Configuration hash: sha256 {} of the canonical "
                    "JSON of every setting that determined the numbers (report.json holds it whole):",
                    d.fileBytes, d.schema, d.configSha256));
    settingsTable(doc, d.configJson);
    return doc;
}

std::string mdCell(const std::string &s)
{
    std::string out;
    for (char c : s) {
        if (c == '|')
            out += "\\|";
        else if (c == '\n')
            out += ' ';
        else
            out += c;
    }
    return out;
}

std::string markdownOf(const Doc &doc)
{
    std::string md;
    for (const auto &b : doc.blocks) {
        switch (b.kind) {
        case Block::Heading:
            md += std::string(size_t(b.level), '#') + " " + b.text + "\n\n";
            break;
        case Block::Para:
            md += b.text + "\n\n";
            break;
        case Block::Code:
            md += "```json\n" + b.text + "\n```\n\n";
            break;
        case Block::Comparison:
            md += comparisonMarkdown(*b.sample);
            break;
        case Block::Chart:
            md +=
                "![" + b.chart->title + "](charts/" + b.chart->id + ".png)\n\n*" + b.chart->caption + "*\n\n";
            break;
        case Block::Table: {
            md += "|";
            for (const auto &h : b.header)
                md += " " + mdCell(h) + " |";
            md += "\n|";
            for (size_t i = 0; i < b.header.size(); ++i)
                md += "---|";
            md += "\n";
            for (const auto &r : b.rows) {
                md += "|";
                for (const auto &c : r)
                    md += " " + mdCell(c) + " |";
                md += "\n";
            }
            md += "\n";
            break;
        }
        }
    }
    return md;
}

// imageSrc maps a chart to its src attribute: a data URI for HTML, a resource URL for PDF.
// A section's HTML id: its title in lower-case letters, digits and dashes ("Replay ledger run-1" ->
// "replay-ledger-run-1"), made unique with "-2", "-3", ...
std::string sectionId(const std::string &title, std::set<std::string> &taken)
{
    std::string id;
    for (char c : title) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) && u < 0x80)
            id += char(std::tolower(u));
        else if (!id.empty() && id.back() != '-')
            id += '-';
    }
    while (!id.empty() && id.back() == '-')
        id.pop_back();
    if (id.empty())
        id = "section";
    std::string unique = id;
    for (int n = 2; !taken.insert(unique).second; ++n)
        unique = id + "-" + std::to_string(n);
    return unique;
}

std::string htmlOf(const Doc &doc, const std::string &title, bool withCss, const ChartSource &imageSrc,
                   int imageWidth)
{
    std::set<std::string> ids;
    std::string h =
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + htmlEscape(title) + "</title>\n";
    if (withCss)
        h += "<style>\n"
             "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:2em auto;max-width:1000px;"
             "color:#222;line-height:1.4}\n"
             "h1{border-bottom:2px solid #3b528b}h2{margin-top:2em;border-bottom:1px solid #ccc}\n"
             "table{border-collapse:collapse;margin:0.8em 0;font-size:0.85em}\n"
             "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}"
             "th{background:#eef}tr:nth-child(even) td{background:#fafafa}\n"
             "td{font-variant-numeric:tabular-nums;overflow-wrap:anywhere}\n"
             "figure{margin:1em 0}figcaption{color:#555;font-size:0.9em}img{max-width:100%}\n"
             "pre{background:#f4f4f4;padding:0.8em;white-space:pre-wrap;word-break:break-all;font-size:0.8em}"
             "\n"
             "</style>\n";
    h += "</head><body>\n";
    for (const auto &b : doc.blocks) {
        switch (b.kind) {
        case Block::Heading:
            // sections (h2) carry an id, so a link (report.html#summary) opens one
            if (b.level == 2)
                h += fmt::format("<h2 id=\"{}\">{}</h2>\n", sectionId(b.text, ids), htmlEscape(b.text));
            else
                h += fmt::format("<h{0}>{1}</h{0}>\n", b.level, htmlEscape(b.text));
            break;
        case Block::Para:
            h += "<p>" + htmlEscape(b.text) + "</p>\n";
            break;
        case Block::Code:
            h += "<pre>" + htmlEscape(b.text) + "</pre>\n";
            break;
        case Block::Comparison:
            h += comparisonHtml(*b.sample);
            break;
        case Block::Chart: {
            // at its natural size, never stretched (a 500 px heatmap stays 500 px), at most imageWidth
            const QImage &img = b.chart->image;
            const int natural =
                img.isNull() ? imageWidth : int(img.width() / std::max(1.0, img.devicePixelRatio()));
            if (withCss)
                h += fmt::format("<figure><img src=\"{}\" alt=\"{}\" width=\"{}\"><figcaption>{}</figcaption>"
                                 "</figure>\n",
                                 imageSrc(*b.chart), htmlEscape(b.chart->title),
                                 std::min(imageWidth, natural), htmlEscape(b.chart->caption));
            else // Qt's rich text has no <figure>: the image and its caption as two paragraphs
                h += fmt::format("<p style=\"margin-top:8px\"><img src=\"{}\" alt=\"{}\" width=\"{}\"></p>\n"
                                 "<p style=\"color:#555555;margin-bottom:10px\"><i>{}</i></p>\n",
                                 imageSrc(*b.chart), htmlEscape(b.chart->title),
                                 std::min(imageWidth, natural), htmlEscape(b.chart->caption));
            break;
        }
        case Block::Table:
            h += "<table border=\"1\" cellspacing=\"0\" cellpadding=\"3\"><tr>";
            for (const auto &c : b.header)
                h += "<th>" + htmlEscape(c) + "</th>";
            h += "</tr>\n";
            for (const auto &r : b.rows) {
                h += "<tr>";
                for (const auto &c : r)
                    h += "<td>" + htmlEscape(c) + "</td>";
                h += "</tr>\n";
            }
            h += "</table>\n";
            break;
        }
    }
    h += "</body></html>\n";
    return h;
}

} // namespace

std::string renderMarkdown(const ReportData &data, const std::vector<ReportChart> &charts)
{
    return markdownOf(buildDoc(data, charts));
}

std::string renderHtml(const ReportData &data, const std::vector<ReportChart> &charts,
                       const std::string &title, bool withCss, const ChartSource &imageSrc, int imageWidth)
{
    return htmlOf(buildDoc(data, charts), title, withCss, imageSrc, imageWidth);
}

} // namespace kvwb::ui::report
