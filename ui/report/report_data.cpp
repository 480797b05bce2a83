#include "ui/report/report_data.h"

#include "core/ledger/prices.h"
#include "core/store/ledger_store.h"
#include "core/util/atomic_file.h"
#include "core/util/build_info.h"
#include "core/util/csv.h"
#include "core/util/sha256.h"
#include "ui/report/report_text.h"

#include <QDateTime>
#include <QSysInfo>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <thread>

namespace kvwb::ui {

namespace {

namespace fs = std::filesystem;
using core::csvField;
using nlohmann::json;
using report::ensureDir;
using report::exact;
using report::safeName;
using report::validUtf8;

std::string utcNow()
{
    return QDateTime::currentDateTimeUtc().toString(Qt::ISODate).toStdString();
}

std::string cpuModel()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                std::string v = line.substr(colon + 1);
                v.erase(0, v.find_first_not_of(" \t"));
                return v;
            }
        }
    }
    return "unknown";
}

json parseSettings(const std::string &text)
{
    if (text.empty())
        return nullptr;
    try {
        return json::parse(text);
    } catch (const json::exception &) {
        return text; // kept verbatim: the stores validate JSON, but a report must never fail on it
    }
}

std::string tableCsv(const core::MetricTable &t)
{
    std::string out;
    for (size_t c = 0; c < t.columns.size(); ++c)
        out += (c ? "," : "") + csvField(t.columns[c]);
    out += "\n";
    for (const auto &row : t.rows) {
        for (size_t c = 0; c < row.size(); ++c)
            out += (c ? "," : "") + exact(row[c]);
        out += "\n";
    }
    return out;
}

std::string matrixCsv(const core::Matrix &m)
{
    std::string out = "b_layer";
    for (int c = 0; c < m.cols; ++c)
        out += ",a_layer_" + std::to_string(c);
    out += "\n";
    for (int r = 0; r < m.rows; ++r) {
        out += std::to_string(r);
        for (int c = 0; c < m.cols; ++c)
            out += "," + exact(m.data[size_t(r) * size_t(m.cols) + size_t(c)]);
        out += "\n";
    }
    return out;
}

json tableJson(const core::MetricTable &t)
{
    return {{"columns", t.columns}, {"rows", t.rows}};
}

json matrixJson(const core::Matrix &m)
{
    json rows = json::array();
    for (int r = 0; r < m.rows; ++r)
        rows.push_back(std::vector<double>(m.data.begin() + ptrdiff_t(r) * m.cols,
                                           m.data.begin() + ptrdiff_t(r + 1) * m.cols));
    return {{"rows", m.rows}, {"cols", m.cols}, {"data", rows}};
}

json modelJson(const core::ModelInfo &m)
{
    const auto &c = m.config;
    return {{"architecture", c.architecture},
            {"model_type", c.modelType},
            {"layers", c.numLayers},
            {"heads", c.numHeads},
            {"kv_heads", c.numKvHeads},
            {"head_dim", c.headDim},
            {"hidden_size", c.hiddenSize},
            {"vocab_size", c.vocabSize},
            {"rope_theta", c.ropeTheta},
            {"rope_layout", core::ropeLayoutName(c.ropeLayout)},
            {"rope_scaling", c.ropeScaling.type},
            {"rope_scaling_factor", c.ropeScaling.factor},
            {"weights_sha256", m.weightsSha256},
            {"tokenizer_sha256", m.tokenizerSha256},
            {"source_path", m.sourcePath},
            {"captured_layers", m.capturedLayers}};
}

json storageJson(const core::ExperimentOptions &s)
{
    return {{"dtype", core::floatTypeName(s.storage)},
            {"compress", s.compress},
            {"chunk_tokens", s.chunkTokens},
            {"key_form", core::keyFormName(s.keyForm)}};
}

json converterSettingsJson(const core::ConverterRecord &r)
{
    return {{"key_form", core::keyFormName(r.keyForm)},
            {"selection", r.selection},
            {"k", r.k},
            {"lambda_mode", r.lambdaMode},
            {"per_head", r.perHead},
            {"family", core::converterFamilyName(r.family)},
            {"parameters", r.parameterCount()},
            {"bytes", r.bytes()},
            {"fit_seconds", r.fitSeconds},
            {"convert_ms_per_1k", r.convertMsPer1k},
            {"settings", parseSettings(r.settingsJson)},
            {"train_prompts", r.trainPrompts},
            {"valid_prompts", r.validPrompts},
            {"test_prompts", r.testPrompts},
            {"train_tokens", r.trainTokens}};
}

json summaryJson(const core::LedgerSummary &s)
{
    return json::parse(core::ledgerSummaryJson(s));
}

json ledgerRowJson(const core::LedgerRow &r)
{
    json hits = json::object();
    for (const auto &[kind, hit] : r.tierHits)
        hits[core::tierKindName(kind)] = hit;
    return {{"request_id", r.requestId},
            {"arrival_ms", r.arrivalMs},
            {"tenant", r.tenant},
            {"model", core::roleName(r.model)},
            {"intent", r.intent},
            {"answered_by", core::tierKindName(r.answeredBy)},
            {"tier_hits", hits},
            {"cached_intent", r.cachedIntent},
            {"cached_request_id", r.cachedRequestId},
            {"similarity", r.similarity},
            {"false_hit", r.falseHit},
            {"prompt_tokens", r.promptTokens},
            {"tokens_reused", r.tokensReused},
            {"tokens_computed", r.tokensComputed},
            {"generated_tokens", r.generatedTokens},
            {"ttft_ms", r.ttftMs},
            {"total_ms", r.totalMs},
            {"lookup_ms", r.lookupMs},
            {"gate", r.gate},
            {"gate_value", r.gateValue},
            {"shadow_kl", r.shadowKl},
            {"shadow_exact", r.shadowExact},
            {"semantic_decision", core::enumName(core::kSemanticDecisionNames, r.semanticDecision)},
            {"semantic_guard", core::semanticGuardName(r.semanticGuard)},
            {"guarded_same_intent", r.guardedSameIntent},
            {"verifier", core::verifierVerdictName(r.verifier)},
            {"verifier_score", r.verifierScore},
            {"verifier_ms", r.verifierMs},
            {"verified_same_intent", r.verifiedSameIntent}};
}

std::string comparisonsCsv(const std::vector<ReportComparisons> &lists)
{
    std::string out =
        "list,sample,converter,prompt,a_text,scratch_text,transfer_text,a_tokens,scratch_tokens,"
        "transfer_tokens,first_divergence,mean_kl,kl_no_prefix,top1,rouge_l,prompt_tokens_a,"
        "prompt_tokens_b,reused_tokens,ttft_ms_a,ttft_ms_scratch,ttft_ms_transfer,"
        "decode_tok_per_s_a,decode_tok_per_s_scratch,decode_tok_per_s_transfer,source_prefill_ms,"
        "convert_ms,gate_signal,gate_value,gate_threshold,gate_passed,created_utc,expected_answer,"
        "answer_scratch,answer_transfer,answer_a\n";
    for (const auto &l : lists)
        for (size_t i = 0; i < l.samples.size(); ++i) {
            const core::ComparisonSample &s = l.samples[i];
            // whether each path gives the expected answer: 1 / 0, empty without one
            const auto hits = core::answerHits(s);
            const auto given = [&](bool core::AnswerHits::*path) {
                return !hits ? "" : (*hits).*path ? "1" : "0";
            };
            out += fmt::format(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}"
                ",{},{},"
                "{},{}\n",
                csvField(l.name), i, csvField(s.converter), csvField(s.prompt), csvField(s.a.text),
                csvField(s.scratch.text), csvField(s.transfer.text), s.a.ids.size(), s.scratch.ids.size(),
                s.transfer.ids.size(), s.firstDivergence, exact(s.meanKl), exact(s.klNoPrefix), exact(s.top1),
                exact(s.rougeL), s.a.promptTokens, s.scratch.promptTokens, s.transfer.reusedTokens,
                exact(s.a.ttftMs), exact(s.scratch.ttftMs), exact(s.transfer.ttftMs),
                exact(s.a.decodeTokPerS), exact(s.scratch.decodeTokPerS), exact(s.transfer.decodeTokPerS),
                exact(s.sourcePrefillMs), exact(s.convertMs), csvField(s.gateSignal), exact(s.gateValue),
                exact(s.gateThreshold), s.gatePassed ? 1 : 0, csvField(s.createdUtc),
                csvField(s.expectedAnswer), given(&core::AnswerHits::scratch),
                given(&core::AnswerHits::transfer), given(&core::AnswerHits::a));
        }
    return out;
}

} // namespace

ReportData collectReport(const fs::path &experiment)
{
    ReportData d;
    d.experiment = experiment;
    {
        const auto r = core::ExperimentReader::open(experiment); // closed before the stores open it
        d.schema = r.schema();
        d.provenance = r.provenance();
        d.modelA = r.model(core::ModelRole::A);
        d.modelB = r.model(core::ModelRole::B);
        d.storage = r.storage();
        d.prompts = r.promptCount();
        d.tokensA = r.totalTokens(core::ModelRole::A);
        d.tokensB = r.totalTokens(core::ModelRole::B);
    }
    std::error_code ec;
    d.fileBytes = fs::file_size(experiment, ec);
    for (const auto &name : core::listConverters(experiment)) {
        d.converters.push_back(core::loadConverters(experiment, name, core::ConverterParts::MetricsOnly));
    }
    for (const auto &name : core::listTables(experiment)) {
        ReportSweep s;
        s.name = name;
        s.table = core::loadTable(experiment, name, &s.settingsJson);
        d.sweeps.push_back(std::move(s));
    }
    for (const auto &name : core::listLedgers(experiment)) {
        ReportLedger l;
        l.name = name;
        l.rows = core::loadLedger(experiment, name, &l.settingsJson);
        l.summary = core::summarize(l.rows);
        d.ledgers.push_back(std::move(l));
    }
    for (const auto &name : core::listComparisons(experiment))
        d.comparisons.push_back({name, core::loadComparisons(experiment, name)});
    d.environment.appVersion = core::appVersion();
    d.environment.gitCommit = core::gitCommit();
    d.environment.qtVersion = qVersion();
    d.environment.cpuModel = cpuModel();
    d.environment.threads = int(std::thread::hardware_concurrency());
    d.environment.os = QSysInfo::prettyProductName().toStdString();
    d.environment.createdUtc = utcNow();

    json config = {{"capture_config_sha256", d.provenance.configSha256},
                   {"storage", storageJson(d.storage)},
                   {"models",
                    {{"a",
                      {{"weights_sha256", d.modelA.weightsSha256},
                       {"tokenizer_sha256", d.modelA.tokenizerSha256},
                       {"captured_layers", d.modelA.capturedLayers}}},
                     {"b",
                      {{"weights_sha256", d.modelB.weightsSha256},
                       {"tokenizer_sha256", d.modelB.tokenizerSha256},
                       {"captured_layers", d.modelB.capturedLayers}}}}},
                   {"converters", json::object()},
                   {"sweeps", json::object()},
                   {"ledgers", json::object()}};
    for (const auto &r : d.converters)
        config["converters"][r.name] = converterSettingsJson(r);
    for (const auto &s : d.sweeps)
        config["sweeps"][s.name] = parseSettings(s.settingsJson);
    for (const auto &l : d.ledgers)
        config["ledgers"][l.name] = parseSettings(l.settingsJson);
    // The converter behind each list's transfer paths determined its numbers (the texts and metrics
    // are results). Only present when there are lists, so older reports keep their hash.
    // The gate's signal and threshold decided each sample's pass/fail, so they count too.
    for (const auto &c : d.comparisons) {
        std::set<std::string> converters, gates;
        for (const auto &s : c.samples) {
            converters.insert(validUtf8(s.converter));
            gates.insert(fmt::format("{} {}", validUtf8(s.gateSignal), s.gateThreshold));
        }
        config["comparisons"][c.name] = {{"converters", converters}, {"gates", gates}};
    }
    d.configJson = config.dump();
    d.configSha256 = core::sha256Hex(std::string_view(d.configJson));
    return d;
}

std::vector<EnvironmentRow> environmentRows(const ReportData &d)
{
    const auto &p = d.provenance;
    const auto &e = d.environment;
    return {{"app_version", "kvwb version", p.appVersion, e.appVersion},
            {"git_commit", "git commit", p.gitCommit, e.gitCommit},
            {"qt_version", "Qt", p.qtVersion, e.qtVersion},
            {"torch_version", "LibTorch", p.torchVersion, std::nullopt},
            {"hdf5_version", "HDF5", p.hdf5Version, std::nullopt},
            {"device_or_cpu", "device / CPU", p.device, e.cpuModel},
            {"threads", "threads", std::nullopt, std::to_string(e.threads)},
            {"", "OS", std::nullopt, e.os},
            {"created_utc", "created (UTC)", p.createdUtc, e.createdUtc},
            {"run_id", "run id", p.runId, std::nullopt},
            // The report's own configuration hash: the document gives it in its introduction.
            {"config_sha256", "capture config sha256", p.configSha256, d.configSha256, false}};
}

std::string reportJson(const ReportData &d)
{
    const auto &p = d.provenance;
    const auto &e = d.environment;
    json j = {{"format", "kvwb-report/1"},
              {"experiment",
               {{"path", d.experiment.string()},
                {"file_bytes", d.fileBytes},
                {"schema", d.schema},
                {"prompts", d.prompts},
                {"tokens", {{"a", d.tokensA}, {"b", d.tokensB}}},
                {"storage", storageJson(d.storage)}}},
              {"provenance",
               {{"app_version", p.appVersion},
                {"git_commit", p.gitCommit},
                {"qt_version", p.qtVersion},
                {"torch_version", p.torchVersion},
                {"hdf5_version", p.hdf5Version},
                {"device", p.device},
                {"created_utc", p.createdUtc},
                {"run_id", p.runId},
                {"config_sha256", p.configSha256}}},
              {"environment",
               {{"app_version", e.appVersion},
                {"git_commit", e.gitCommit},
                {"qt_version", e.qtVersion},
                {"cpu_model", e.cpuModel},
                {"threads", e.threads},
                {"os", e.os},
                {"created_utc", e.createdUtc}}},
              {"models", {{"a", modelJson(d.modelA)}, {"b", modelJson(d.modelB)}}},
              {"configuration", {{"sha256", d.configSha256}, {"settings", json::parse(d.configJson)}}},
              {"converters", json::array()},
              {"sweeps", json::array()},
              {"ledgers", json::array()},
              {"comparisons", json::array()},
              {"warnings", d.warnings}};
    for (const auto &r : d.converters) {
        json c = converterSettingsJson(r);
        c["name"] = r.name;
        c["created_utc"] = r.createdUtc;
        c["app_version"] = r.appVersion;
        c["git_commit"] = r.gitCommit;
        json layers = json::array();
        for (const auto &l : r.layers) {
            json maps = json::array();
            for (const auto *kind : {&l.keys, &l.values})
                for (const auto &m : *kind)
                    maps.push_back({{"kind", kind == &l.keys ? "keys" : "values"},
                                    {"input_dim", m.inputDim},
                                    {"output_dim", m.outputDim},
                                    {"lambda", m.lambda}});
            layers.push_back({{"target_layer", l.targetLayer},
                              {"source_layers", l.sourceLayers},
                              {"head_matched", l.headMatched},
                              {"maps", maps}});
        }
        c["layers"] = layers;
        c["layer_metrics"] = tableJson(r.layerMetrics);
        c["head_metrics"] = tableJson(r.headMetrics);
        c["cka_keys"] = matrixJson(r.ckaKeys);
        c["cka_values"] = matrixJson(r.ckaValues);
        j["converters"].push_back(c);
    }
    for (const auto &s : d.sweeps)
        j["sweeps"].push_back(
            {{"name", s.name}, {"settings", parseSettings(s.settingsJson)}, {"table", tableJson(s.table)}});
    for (const auto &l : d.ledgers) {
        json rows = json::array();
        for (const auto &r : l.rows)
            rows.push_back(ledgerRowJson(r));
        j["ledgers"].push_back({{"name", l.name},
                                {"settings", parseSettings(l.settingsJson)},
                                {"summary", summaryJson(l.summary)},
                                {"prices", json::parse(core::priceComparisonJson(
                                               core::comparePrices(l.rows, core::builtinPricePresets())))},
                                {"rows", rows}});
    }
    for (const auto &c : d.comparisons) {
        json samples = json::array();
        for (const auto &s : c.samples)
            samples.push_back(json::parse(core::comparisonSampleJson(s)));
        j["comparisons"].push_back({{"name", c.name}, {"samples", samples}});
    }
    return j.dump(1);
}

std::vector<fs::path> writeCsvJson(ReportData &data, const fs::path &outDir)
{
    ensureDir(outDir);
    const fs::path csvDir = outDir / "csv";
    ensureDir(csvDir);
    std::vector<fs::path> written;
    const auto put = [&](const fs::path &path, const std::string &text) {
        core::writeFileAtomic(path, text);
        written.push_back(path);
    };
    put(outDir / "report.json", reportJson(data));
    {
        std::string models = "field,a,b\n";
        const json a = modelJson(data.modelA), b = modelJson(data.modelB);
        for (auto it = a.begin(); it != a.end(); ++it) {
            const auto text = [](const json &v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
            models += csvField(it.key()) + "," + csvField(text(it.value())) + "," +
                      csvField(text(b[it.key()])) + "\n";
        }
        put(csvDir / "models.csv", models);
    }
    {
        std::string env = "field,experiment_file,this_report\n";
        for (const auto &r : environmentRows(data))
            if (!r.key.empty())
                env += csvField(r.key) + "," + csvField(r.experiment.value_or("")) + "," +
                       csvField(r.report.value_or("")) + "\n";
        put(csvDir / "environment.csv", env);
    }
    for (const auto &r : data.converters) {
        const std::string stem = "converter_" + safeName(r.name);
        put(csvDir / (stem + "_layers.csv"), tableCsv(r.layerMetrics));
        put(csvDir / (stem + "_heads.csv"), tableCsv(r.headMetrics));
        put(csvDir / (stem + "_cka_keys.csv"), matrixCsv(r.ckaKeys));
        put(csvDir / (stem + "_cka_values.csv"), matrixCsv(r.ckaValues));
    }
    for (const auto &s : data.sweeps)
        put(csvDir / ("sweep_" + safeName(s.name) + ".csv"), tableCsv(s.table));
    for (const auto &l : data.ledgers) {
        put(csvDir / ("ledger_" + safeName(l.name) + ".csv"), core::ledgerToCsv(l.rows));
        std::string tiers =
            "tier,requests,hits,false_hits,tokens_reused,tokens_computed,ttft_ms_p50,ttft_ms_p95,"
            "ttft_ms_p99\n";
        for (const auto &[kind, a] : l.summary.tiers)
            tiers += fmt::format("{},{},{},{},{},{},{},{},{}\n", core::tierKindName(kind), a.requests, a.hits,
                                 a.falseHits, a.tokensReused, a.tokensComputed, exact(a.ttftMsP50),
                                 exact(a.ttftMsP95), exact(a.ttftMsP99));
        put(csvDir / ("ledger_" + safeName(l.name) + "_tiers.csv"), tiers);
    }
    if (!data.comparisons.empty())
        put(csvDir / "comparisons.csv", comparisonsCsv(data.comparisons));
    return written;
}

} // namespace kvwb::ui
