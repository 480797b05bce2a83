#include "core/project.h"

#include "core/atomic_file.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace kvwb::core {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

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

} // namespace

Project Project::load(const fs::path &file)
{
    std::ifstream in(file, std::ios::binary);
    if (!in)
        throw Error(ErrorCode::Io, file.string() + ": cannot read project");
    std::stringstream ss;
    ss << in.rdbuf();
    json j;
    try {
        j = json::parse(ss.str());
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
    p.extraJson = extra.dump();
    return p;
}

void Project::save(const fs::path &file) const
{
    const fs::path dir = fs::absolute(file).parent_path();
    json j = json::parse(extraJson.empty() ? "{}" : extraJson);
    j["schema"] = kSchema;
    j["name"] = name;
    j["description"] = description;
    auto model = [&](const ProjectModel &m) {
        return json{{"path", relativeTo(m.path, dir).string()}, {"device", m.device}, {"dtype", m.dtype}};
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
    writeFileAtomic(file, j.dump(2) + "\n");
}

Project Project::resolved(const fs::path &file) const
{
    const fs::path dir = fs::absolute(file).parent_path();
    auto abs = [&](const fs::path &p) { return p.is_absolute() ? p : (dir / p).lexically_normal(); };
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
    return r;
}

} // namespace kvwb::core
