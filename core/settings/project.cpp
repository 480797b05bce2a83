#include "core/settings/project.h"

#include "core/model/encoder_config.h"

#include "core/model/model_config.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/store_url.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>

namespace kvwb::core {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxProjectBytes = uint64_t(64) << 20; // a project file is settings, not data

constexpr const char *kSchema = "kvwb-project/1";

const json &field(const json &j, const char *name, json::value_t type, const std::string &where,
                  const fs::path &file)
{
    if (!j.contains(name))
        throw Error(ErrorCode::Config, file.string() + ": field '" + where + name + "' is missing");
    const json &v = j.at(name);
    const bool ok = type == json::value_t::string   ? v.is_string()
                    : type == json::value_t::object ? v.is_object()
                                                    : v.is_array();
    if (!ok)
        throw Error(ErrorCode::Config, file.string() + ": field '" + where + name + "' has the wrong type");
    return v;
}

std::string optString(const json &j, const char *name, const std::string &fallback, const std::string &where,
                      const fs::path &file)
{
    if (!j.contains(name))
        return fallback;
    if (!j.at(name).is_string())
        throw Error(ErrorCode::Config, file.string() + ": field '" + where + name + "' must be a string");
    return j.at(name).get<std::string>();
}

ProjectModel readModel(const json &j, const char *role, const fs::path &file)
{
    const json &m = field(j, role, json::value_t::object, "models.", file);
    const std::string where = std::string("models.") + role + ".";
    ProjectModel pm;
    pm.path = field(m, "path", json::value_t::string, where, file).get<std::string>();
    pm.device = optString(m, "device", "cpu", where, file);
    pm.dtype = optString(m, "dtype", "f32", where, file);
    if (pm.device != "cpu" && pm.device != "cuda")
        throw Error(ErrorCode::Config, file.string() + ": field '" + where +
                                           "device' must be cpu or cuda, got '" + pm.device + "'");
    if (pm.dtype != "f32" && pm.dtype != "bf16" && pm.dtype != "f16")
        throw Error(ErrorCode::Config, file.string() + ": field '" + where +
                                           "dtype' must be f32, bf16 or f16, got '" + pm.dtype + "'");
    if (m.contains("context")) {
        const json &c = m.at("context");
        constexpr int64_t kMaxContext = kMaxPositions;
        if (!c.is_number_integer() || (c.is_number_unsigned() && c.get<uint64_t>() > uint64_t(kMaxContext)) ||
            c.get<int64_t>() < 0 || c.get<int64_t>() > kMaxContext)
            throw Error(ErrorCode::Config,
                        file.string() + ": field '" + where + "context' must be an integer in 0.." +
                            std::to_string(kMaxContext) + " (0: the model's own), got " + c.dump());
        pm.context = int(c.get<int64_t>());
    }
    return pm;
}

std::vector<fs::path> readPaths(const json &j, const char *name, const fs::path &file)
{
    std::vector<fs::path> out;
    if (!j.contains(name))
        return out;
    for (const auto &v : field(j, name, json::value_t::array, "", file)) {
        if (!v.is_string())
            throw Error(ErrorCode::Config, file.string() + ": field '" + name + "' must list strings");
        out.emplace_back(v.get<std::string>());
    }
    return out;
}

fs::path relativeTo(const fs::path &p, const fs::path &dir)
{
    if (p.is_relative() || dir.empty())
        return p;
    std::error_code ec;
    const auto rel = fs::relative(p, dir, ec);
    return !ec && !rel.empty() && *rel.begin() != ".." ? rel : p;
}

// ---- the settings sections ("capture", "alignment", "replay") ----

// Reads one section's fields, each optional (absent: the struct's default), and remembers which
// keys it knew so that the others can be kept for a later version.
class Section
{
public:
    Section(const json &root, const char *name, const fs::path &file) : m_name(name), m_file(file)
    {
        if (!root.contains(name))
            return;
        const json &v = root.at(name);
        if (!v.is_object())
            throw Error(ErrorCode::Config, file.string() + ": field '" + name + "' must be an object");
        m_json = &v;
    }

    const std::string &name() const { return m_name; }
    std::string path(const char *key) const { return m_name + "." + key; }
    [[noreturn]] void fail(const std::string &field, const std::string &what) const
    {
        throw Error(ErrorCode::Config, m_file.string() + ": field '" + field + "' " + what);
    }
    const json *find(const std::string &key)
    {
        m_known.push_back(key);
        return m_json && m_json->contains(key) ? &m_json->at(key) : nullptr;
    }

    void string(const char *key, std::string &out, std::initializer_list<const char *> allowed = {})
    {
        const json *v = find(key);
        if (!v)
            return;
        if (!v->is_string())
            fail(path(key), "must be a string");
        const std::string s = v->get<std::string>();
        if (allowed.size() && !isOneOf(s, allowed))
            fail(path(key), "must be " + oneOf(allowed) + ", got '" + s + "'");
        out = s;
    }
    template <typename Int> void integer(const char *key, Int &out, int64_t lo, int64_t hi)
    {
        const json *v = find(key);
        if (!v)
            return;
        if (!v->is_number_integer())
            fail(path(key), "must be an integer");
        const int64_t n = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                              ? INT64_MAX
                              : v->get<int64_t>();
        if (n < lo || n > hi)
            fail(path(key),
                 hi == INT64_MAX || hi == INT32_MAX
                     ? "must be >= " + std::to_string(lo) + ", got " + v->dump()
                     : "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v->dump());
        out = Int(n);
    }
    void number(const char *key, double &out, double lo, double hi, bool loOpen = false)
    {
        const json *v = find(key);
        if (!v)
            return;
        if (!v->is_number())
            fail(path(key), "must be a number");
        const double d = v->get<double>();
        if (loOpen ? !(d > lo) : !(d >= lo))
            fail(path(key), fmt::format("must be {} {}, got {}", loOpen ? ">" : ">=", lo, d));
        if (!(d <= hi))
            fail(path(key), fmt::format("must be <= {}, got {}", hi, d));
        out = d;
    }
    void boolean(const char *key, bool &out)
    {
        const json *v = find(key);
        if (!v)
            return;
        if (!v->is_boolean())
            fail(path(key), "must be true or false");
        out = v->get<bool>();
    }

    // The keys this version did not read, to be written back unchanged; null when there are none.
    json unknown() const
    {
        if (!m_json)
            return nullptr;
        json rest = *m_json;
        for (const auto &k : m_known)
            rest.erase(k);
        return rest.empty() ? json(nullptr) : rest;
    }

    static bool isOneOf(const std::string &s, std::initializer_list<const char *> allowed)
    {
        for (const char *a : allowed)
            if (s == a)
                return true;
        return false;
    }
    static std::string oneOf(std::initializer_list<const char *> allowed)
    {
        std::string out;
        size_t i = 0;
        for (const char *a : allowed) {
            out += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::string(a);
            ++i;
        }
        return out;
    }

private:
    std::string m_name;
    const fs::path &m_file;
    const json *m_json = nullptr;
    std::vector<std::string> m_known;
};

constexpr double kDoubleMax = std::numeric_limits<double>::max();

// A string of `allowed` (the message lists them) read as an enum by `parse`.
template <typename T, typename Parse>
void readName(Section &s, const char *key, T &out, Parse parse, std::initializer_list<const char *> allowed)
{
    std::string name;
    s.string(key, name, allowed);
    if (!name.empty())
        out = *parse(name);
}

CaptureSettings readCapture(Section &s)
{
    CaptureSettings c;
    readName(s, "storage", c.storage, parseFloatType, {"f32", "f16", "bf16"});
    s.integer("compress", c.compress, 0, 9);
    s.integer("max_tokens", c.maxTokens, 0, INT32_MAX);
    s.integer("limit", c.limit, 0, INT32_MAX);
    s.boolean("post_rope", c.postRope);
    return c;
}

ProjectAlignment readAlignment(Section &s)
{
    ProjectAlignment a;
    FitSettings &f = a.fit;
    s.string("name", f.name);
    readName(s, "selection", f.selection, parseLayerSelection, {"proportional", "topk", "all"});
    s.integer("k", f.k, 1, INT32_MAX);
    s.boolean("auto_lambda", f.autoLambda);
    s.number("lambda", f.lambda, 0.0, kDoubleMax, true);
    s.boolean("per_head", f.perHead);
    readName(s, "family", f.family, parseConverterFamily, {"auto", "ridge", "attn_ridge", "low_rank", "mlp"});
    s.integer("rank", f.rank, 1, 1 << 20);
    s.integer("mlp_hidden", f.mlpHidden, 1, 1 << 20);
    s.integer("mlp_epochs", f.mlpEpochs, 0, 100000);
    s.number("budget_seconds", f.budgetSeconds, 0.0, 1e9);
    s.integer("auto_prompts", f.autoPrompts, 1, INT32_MAX);
    std::string features;
    s.string("token_features", features);
    if (!features.empty()) {
        const auto parsed = parseTokenFeatures(features);
        if (!parsed)
            s.fail(
                s.path("token_features"),
                "must be none, all or a comma list of b, window[=N] (N 0-4) and offsets[=N] (N 2-64), got '" +
                    features + "'");
        f.tokenFeatures = *parsed;
    }
    readName(s, "objective", f.objective, parseFitObjective, {"kv", "kl"});
    s.integer("kl_epochs", f.klEpochs, 1, 100000);
    s.number("kl_learning_rate", f.klLearningRate, 1e-9, 10.0);
    s.integer("max_train_tokens", f.maxTrainTokens, 0, INT64_MAX);
    s.string("in_use", a.inUse);
    return a;
}

// Reads a settings type's Setting rows present in the section into `out`, each with `set`.
template <typename S, typename Rows, typename Set>
void readSettingRows(Section &s, const Rows &rows, S &out, Set set)
{
    for (const auto &f : rows) {
        if (f.scope != SettingScope::Setting)
            continue;
        const std::string key = f.key();
        const json *v = s.find(key);
        if (!v)
            continue;
        try {
            set(out, f, *v);
        } catch (const Error &e) {
            s.fail(s.path(key.c_str()), e.what());
        }
    }
}

// The Setting rows of core::replayFlags(); "gate" was also what "gate" is now, and "tiers" a list
// then as now.
ReplaySettings readReplay(Section &s)
{
    ReplaySettings r;
    readSettingRows(s, replayFlags(), r, setReplayFlagFromJson);
    return r;
}

// The Setting rows of core::compareFlags() ("prompt" and "max_tokens" were the section's first keys)
// and the prompt set's file.
ProjectCompare readCompare(Section &s)
{
    ProjectCompare c;
    readSettingRows<CompareSettings>(s, compareFlags(), c, setCompareFlagFromJson);
    s.string("prompts", c.promptsFile);
    return c;
}

ProjectKnowledge readKnowledge(Section &s)
{
    ProjectKnowledge k;
    std::string graph, profiles;
    s.string("graph", graph);
    s.string("profiles", profiles);
    k.graph = graph;
    k.profiles = profiles;
    s.boolean("use_in_replays", k.useInReplays);
    return k;
}

json knowledgeJson(const ProjectKnowledge &k, const fs::path &dir)
{
    return {{"graph", k.graph.empty() ? std::string() : relativeTo(k.graph, dir).string()},
            {"profiles", k.profiles.empty() ? std::string() : relativeTo(k.profiles, dir).string()},
            {"use_in_replays", k.useInReplays}};
}

json compareJson(const ProjectCompare &c, const fs::path &dir)
{
    json j = compareSettingsToJson(c, {CompareFlag::Scope::Setting});
    j["prompts"] = c.promptsFile.empty() ? std::string() : relativeTo(c.promptsFile, dir).string();
    return j;
}

json captureJson(const CaptureSettings &c)
{
    return {{"storage", floatTypeName(c.storage)},
            {"compress", c.compress},
            {"max_tokens", c.maxTokens},
            {"limit", c.limit},
            {"post_rope", c.postRope}};
}

json alignmentJson(const ProjectAlignment &a)
{
    const FitSettings &f = a.fit;
    return {{"name", f.name},
            {"selection", layerSelectionName(f.selection)},
            {"k", f.k},
            {"auto_lambda", f.autoLambda},
            {"lambda", f.lambda},
            {"per_head", f.perHead},
            {"family", converterFamilyName(f.family)},
            {"rank", f.rank},
            {"mlp_hidden", f.mlpHidden},
            {"mlp_epochs", f.mlpEpochs},
            {"budget_seconds", f.budgetSeconds},
            {"auto_prompts", f.autoPrompts},
            {"token_features", tokenFeaturesText(f.tokenFeatures)},
            {"objective", fitObjectiveName(f.objective)},
            {"kl_epochs", f.klEpochs},
            {"kl_learning_rate", f.klLearningRate},
            {"max_train_tokens", f.maxTrainTokens},
            {"in_use", a.inUse}};
}

json replayJson(const ReplaySettings &r)
{
    return replaySettingsToJson(r, {ReplayFlag::Scope::Setting});
}

} // namespace

Project Project::load(const fs::path &file)
{
    const std::string text = text::readWholeFile(file, kMaxProjectBytes);
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Format, file.string() + ": not JSON: " + e.what());
    }
    if (!j.is_object())
        throw Error(ErrorCode::Format, file.string() + ": a project is a JSON object");
    const std::string schema = optString(j, "schema", "", "", file);
    if (schema != kSchema)
        throw Error(ErrorCode::Format, file.string() + ": schema '" + schema + "' is not " + kSchema);
    Project p;
    p.name = optString(j, "name", file.stem().string(), "", file);
    p.description = optString(j, "description", "", "", file);
    const json &models = field(j, "models", json::value_t::object, "", file);
    p.modelA = readModel(models, "a", file);
    p.modelB = readModel(models, "b", file);
    p.promptSets = readPaths(j, "prompt_sets", file);
    p.workloads = readPaths(j, "workloads", file);
    if (j.contains("corpus"))
        p.corpus = optString(j, "corpus", "", "", file);
    if (j.contains("experiment"))
        p.experiment = optString(j, "experiment", "", "", file);
    json extra = j;
    for (const char *k :
         {"schema", "name", "description", "models", "prompt_sets", "workloads", "corpus", "experiment"})
        extra.erase(k);
    // The sections' known keys live in the structs; any others stay in extraJson under the
    // section's name, so that save() can merge them back.
    Section capture(j, "capture", file), alignment(j, "alignment", file), replay(j, "replay", file),
        compare(j, "compare", file), knowledge(j, "knowledge", file);
    p.capture = readCapture(capture);
    p.alignment = readAlignment(alignment);
    p.replay = readReplay(replay);
    p.compare = readCompare(compare);
    p.knowledge = readKnowledge(knowledge);
    for (const Section *sec : {&capture, &alignment, &replay, &compare, &knowledge}) {
        const json rest = sec->unknown();
        if (rest.is_null())
            extra.erase(sec->name());
        else
            extra[sec->name()] = rest;
    }
    p.extraJson = extra.dump();
    return p;
}

void Project::save(const fs::path &file) const
{
    writeFileAtomic(file, toJson(file));
}

std::string Project::toJson(const fs::path &file) const
{
    const fs::path dir = fs::absolute(file).parent_path();
    json j = json::parse(extraJson.empty() ? "{}" : extraJson);
    j["schema"] = kSchema;
    j["name"] = name;
    j["description"] = description;
    auto model = [&](const ProjectModel &m) {
        json o{{"path", relativeTo(m.path, dir).string()}, {"device", m.device}, {"dtype", m.dtype}};
        if (m.context > 0)
            o["context"] = m.context;
        return o;
    };
    j["models"] = {{"a", model(modelA)}, {"b", model(modelB)}};
    auto paths = [&](const std::vector<fs::path> &ps) {
        json a = json::array();
        for (const auto &p : ps)
            a.push_back(relativeTo(p, dir).string());
        return a;
    };
    j["prompt_sets"] = paths(promptSets);
    j["workloads"] = paths(workloads);
    if (corpus)
        j["corpus"] = relativeTo(*corpus, dir).string();
    if (experiment)
        j["experiment"] = relativeTo(*experiment, dir).string();
    // Always every section; keys kept from a newer version's section come first, ours win.
    const auto section = [&](const char *key, const json &known) {
        json merged = j.contains(key) && j[key].is_object() ? j[key] : json::object();
        merged.update(known);
        j[key] = merged;
    };
    section("capture", captureJson(capture));
    section("alignment", alignmentJson(alignment));
    section("replay", replayJson(replay));
    section("compare", compareJson(compare, dir));
    section("knowledge", knowledgeJson(knowledge, dir));
    if (!isBuiltinEmbedder(replay.embedder))
        j["replay"]["embedder"] = relativeTo(replay.embedder, dir).string();
    return j.dump(2) + "\n";
}

Project Project::resolved(const fs::path &file) const
{
    const fs::path dir = fs::absolute(file).parent_path();
    // an empty path (a model not chosen yet) stays empty
    auto abs = [&](const fs::path &p) {
        return p.empty() || p.is_absolute() ? p : (dir / p).lexically_normal();
    };
    Project r = *this;
    r.modelA.path = abs(modelA.path);
    r.modelB.path = abs(modelB.path);
    for (auto &p : r.promptSets)
        p = abs(p);
    for (auto &p : r.workloads)
        p = abs(p);
    if (r.corpus)
        r.corpus = abs(*r.corpus);
    if (r.experiment)
        r.experiment = abs(*r.experiment);
    if (!r.compare.promptsFile.empty())
        r.compare.promptsFile = abs(r.compare.promptsFile).string();
    r.knowledge.graph = abs(knowledge.graph);
    r.knowledge.profiles = abs(knowledge.profiles);
    if (!isBuiltinEmbedder(r.replay.embedder))
        r.replay.embedder = abs(r.replay.embedder).string();
    return r;
}

} // namespace kvwb::core
