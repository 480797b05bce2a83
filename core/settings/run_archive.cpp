#include "core/settings/run_archive.h"

#include "core/model/encoder_config.h"
#include "core/settings/project.h"
#include "core/store/experiment_file.h"
#include "core/util/atomic_file.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "core/util/text_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <set>

namespace kvwb::core {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kMaxManifestBytes = size_t(1) << 20;
constexpr size_t kMaxFiles = 10000;
constexpr uint64_t kMaxFileBytes = uint64_t(1) << 44; // 16 TiB: beyond any run, below overflow
constexpr size_t kChunk = size_t(1) << 20;

struct ArchiveDeleter
{
    void operator()(archive *a) const { archive_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveDeleter>;

struct EntryDeleter
{
    void operator()(archive_entry *e) const { archive_entry_free(e); }
};

// A path inside the archive this build writes and accepts: "run/..." of plain names, no "..", ".",
// empty part, backslash or control character, and not the manifest's own name.
bool safeEntryPath(const std::string &p)
{
    if (p.size() > 1024 || p.rfind("run/", 0) != 0 || p.back() == '/')
        return false;
    size_t start = 0;
    while (start <= p.size()) {
        const size_t end = std::min(p.find('/', start), p.size());
        const std::string part = p.substr(start, end - start);
        if (part.empty() || part == "." || part == "..")
            return false;
        start = end + 1;
    }
    for (char c : p)
        if (static_cast<unsigned char>(c) < 0x20 || c == '\\' || c == ':')
            return false;
    return !text::firstInvalidUtf8(p).has_value();
}

bool isSha256Hex(const std::string &s)
{
    if (s.size() != 64)
        return false;
    for (char c : s)
        if (text::hexDigit(c) < 0 || (c >= 'A' && c <= 'F'))
            return false;
    return true;
}

std::string archiveError(archive *a)
{
    const char *e = archive_error_string(a);
    return e ? e : "unknown archive error";
}

// The file's size and SHA-256, read once.
ArchivedFile describe(const fs::path &source, const std::string &entry)
{
    std::error_code ec;
    const uintmax_t bytes = fs::file_size(source, ec);
    if (ec)
        throw Error(ErrorCode::Io, source.string() + ": " + ec.message());
    return {entry, uint64_t(bytes), sha256Files({source})};
}

// Names archive entries for the project's files: run/<experiment>, run/data/<name> (a second file
// of the same name becomes <stem>-2<ext>, ...).
class EntryNames
{
public:
    std::string take(const std::string &folder, const fs::path &source)
    {
        const std::string stem = source.stem().string(), ext = source.extension().string();
        std::string name = folder + source.filename().string();
        for (int n = 2; !m_taken.insert(name).second; ++n)
            name = folder + stem + "-" + std::to_string(n) + ext;
        return name;
    }

private:
    std::set<std::string> m_taken;
};

struct Planned
{
    fs::path source;
    ArchivedFile file;
};

// The archived project and what goes into the archive, from the project saved at projectFile.
struct Plan
{
    std::string projectJson;
    ArchiveManifest manifest;
    std::vector<Planned> files; // without the project, which is written from projectJson
};

Plan planArchive(const fs::path &projectFile)
{
    Plan plan;
    Project p = Project::load(projectFile).resolved(projectFile);
    const std::optional<fs::path> experimentFile = p.experiment; // before it is renamed into the archive
    // Staged names only: toJson makes them relative to the archived project's folder.
    const fs::path stage = fs::path("/kvwb-archive-stage") / "run";
    EntryNames names;
    std::map<fs::path, std::string> entryOf; // one entry per source file
    const auto archive = [&](fs::path &path, const std::string &folder, const std::string &what) {
        if (path.empty())
            return;
        std::error_code ec;
        if (!fs::is_regular_file(path, ec)) {
            plan.manifest.leftOut.push_back(what + " " + path.string() + ": not found");
            return;
        }
        const fs::path key = fs::weakly_canonical(path, ec);
        auto it = entryOf.find(key);
        if (it == entryOf.end()) {
            const std::string entry = names.take(folder, path);
            it = entryOf.emplace(key, entry).first;
            plan.files.push_back({path, describe(path, entry)});
        }
        path = stage.parent_path() / it->second;
    };
    if (p.experiment)
        archive(*p.experiment, "run/", "experiment");
    for (auto &f : p.promptSets)
        archive(f, "run/data/", "prompt set");
    for (auto &f : p.workloads)
        archive(f, "run/data/", "workload");
    if (p.corpus)
        archive(*p.corpus, "run/data/", "corpus");
    archive(p.knowledge.graph, "run/data/", "knowledge graph");
    archive(p.knowledge.profiles, "run/data/", "user profiles");
    if (!p.compare.promptsFile.empty()) {
        fs::path f = p.compare.promptsFile;
        archive(f, "run/data/", "Compare prompt set");
        p.compare.promptsFile = f.string();
    }
    if (!p.replay.prices.empty()) { // a preset id, or FILE[#ID]
        const size_t hash = p.replay.prices.find('#');
        fs::path f = p.replay.prices.substr(0, hash);
        std::error_code ec;
        if (f.is_absolute() && fs::is_regular_file(f, ec)) {
            archive(f, "run/data/", "price file");
            p.replay.prices = f.string() + (hash == std::string::npos ? "" : p.replay.prices.substr(hash));
        }
    }

    // The models: their paths and what the experiment file knows of their weights.
    std::map<std::string, ModelInfo> recorded;
    if (experimentFile)
        try {
            const ExperimentReader r = ExperimentReader::open(*experimentFile);
            recorded["a"] = r.model(ModelRole::A);
            recorded["b"] = r.model(ModelRole::B);
        } catch (const Error &e) {
            plan.manifest.leftOut.push_back(std::string("the models' fingerprints: ") + e.what());
        }
    const auto model = [&](const std::string &role, const fs::path &path) {
        if (path.empty())
            return;
        ArchivedModel m{role, path.string(), {}, {}};
        if (const auto it = recorded.find(role); it != recorded.end()) {
            m.weightsSha256 = it->second.weightsSha256;
            m.architecture = it->second.config.architecture;
        }
        plan.manifest.models.push_back(m);
    };
    model("a", p.modelA.path);
    model("b", p.modelB.path);
    if (!isBuiltinEmbedder(p.replay.embedder))
        model("embedder", p.replay.embedder);

    const std::string projectEntry = "run/" + projectFile.filename().string();
    plan.projectJson = p.toJson(stage.parent_path() / projectEntry);
    plan.manifest.project = projectEntry;
    plan.manifest.files.push_back(
        {projectEntry, uint64_t(plan.projectJson.size()), sha256Hex(std::string_view(plan.projectJson))});
    for (const Planned &f : plan.files)
        plan.manifest.files.push_back(f.file);
    plan.manifest.createdUtc = text::utcNowIso8601();
    plan.manifest.appVersion = appVersion();
    return plan;
}

void writeEntry(archive *a, const std::string &name, uint64_t bytes, const fs::path &out)
{
    std::unique_ptr<archive_entry, EntryDeleter> e(archive_entry_new());
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_size(e.get(), int64_t(bytes));
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    if (archive_write_header(a, e.get()) != ARCHIVE_OK)
        throw Error(ErrorCode::Io, out.string() + ": cannot write " + name + ": " + archiveError(a));
}

void writeData(archive *a, const void *data, size_t n, const std::string &name, const fs::path &out)
{
    if (n > 0 && archive_write_data(a, data, n) != la_ssize_t(n))
        throw Error(ErrorCode::Io, out.string() + ": cannot write " + name + ": " + archiveError(a));
}

} // namespace

std::string ArchiveManifest::toJson() const
{
    json j{{"schema", kArchiveSchema}, {"created_utc", createdUtc}, {"app_version", appVersion},
           {"project", project},       {"models", json::array()},   {"files", json::array()},
           {"left_out", leftOut}};
    for (const ArchivedModel &m : models)
        j["models"].push_back({{"role", m.role},
                               {"path", m.path},
                               {"weights_sha256", m.weightsSha256},
                               {"architecture", m.architecture}});
    for (const ArchivedFile &f : files)
        j["files"].push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
    return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

ArchiveManifest ArchiveManifest::fromJson(const std::string &text, const std::string &source)
{
    const std::string where = source + ": " + kArchiveManifestName;
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Format, where + ": not JSON (" + e.what() + ")");
    }
    const auto field = [&](const json &o, const char *key, json::value_t type,
                           const std::string &at) -> const json & {
        if (!o.is_object() || !o.contains(key))
            throw Error(ErrorCode::Format, where + ": " + at + "missing field '" + key + "'");
        const json &v = o[key];
        const bool ok = type == json::value_t::number_unsigned ? v.is_number_unsigned() : v.type() == type;
        if (!ok)
            throw Error(ErrorCode::Format, where + ": " + at + "field '" + key + "' has the wrong type");
        return v;
    };
    if (field(j, "schema", json::value_t::string, "") != kArchiveSchema)
        throw Error(ErrorCode::Format, where + ": schema '" + j["schema"].get<std::string>() + "' is not " +
                                           kArchiveSchema + " (written by a newer kvwb?)");
    ArchiveManifest m;
    m.createdUtc = field(j, "created_utc", json::value_t::string, "").get<std::string>();
    m.appVersion = field(j, "app_version", json::value_t::string, "").get<std::string>();
    m.project = field(j, "project", json::value_t::string, "").get<std::string>();
    const json &models = field(j, "models", json::value_t::array, "");
    const json &files = field(j, "files", json::value_t::array, "");
    if (models.size() > 16 || files.size() > kMaxFiles)
        throw Error(ErrorCode::Format, where + ": more models or files than a run holds");
    for (size_t i = 0; i < models.size(); ++i) {
        const std::string at = "models[" + std::to_string(i) + "]: ";
        ArchivedModel a;
        const std::pair<const char *, std::string *> strings[] = {{"role", &a.role},
                                                                  {"path", &a.path},
                                                                  {"weights_sha256", &a.weightsSha256},
                                                                  {"architecture", &a.architecture}};
        for (const auto &[key, to] : strings)
            *to = field(models[i], key, json::value_t::string, at).get<std::string>();
        if (a.role != "a" && a.role != "b" && a.role != "embedder")
            throw Error(ErrorCode::Format,
                        where + ": " + at + "role '" + a.role + "' is not a, b or embedder");
        m.models.push_back(a);
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < files.size(); ++i) {
        const std::string at = "files[" + std::to_string(i) + "]: ";
        ArchivedFile f;
        f.path = field(files[i], "path", json::value_t::string, at).get<std::string>();
        f.bytes = field(files[i], "bytes", json::value_t::number_unsigned, at).get<uint64_t>();
        f.sha256 = field(files[i], "sha256", json::value_t::string, at).get<std::string>();
        if (!safeEntryPath(f.path))
            throw Error(ErrorCode::Format,
                        where + ": " + at + "path '" + f.path + "' is not a plain path inside run/");
        if (!seen.insert(f.path).second)
            throw Error(ErrorCode::Format, where + ": " + at + "path '" + f.path + "' is listed twice");
        if (f.bytes > kMaxFileBytes)
            throw Error(ErrorCode::Format,
                        where + ": " + at + "size " + std::to_string(f.bytes) + " is too large");
        if (!isSha256Hex(f.sha256))
            throw Error(ErrorCode::Format, where + ": " + at + "sha256 is not 64 lower-case hex digits");
        m.files.push_back(f);
    }
    if (!seen.count(m.project) || m.project.size() < 6 || m.project.substr(m.project.size() - 5) != ".kvwb")
        throw Error(ErrorCode::Format,
                    where + ": the project '" + m.project + "' is not a listed .kvwb file");
    if (j.contains("left_out") && j["left_out"].is_array())
        for (const json &l : j["left_out"])
            if (l.is_string() && m.leftOut.size() < 1000)
                m.leftOut.push_back(l.get<std::string>());
    return m;
}

ArchiveManifest exportRunArchive(const fs::path &projectFile, const fs::path &out, bool replace)
{
    claimOutputFile(out, "--out", replace);
    Plan plan = planArchive(projectFile);
    const fs::path tmp = fs::path(out.string() + ".tmp");
    TempPathGuard guard(tmp);
    ArchivePtr a(archive_write_new());
    if (!a || archive_write_set_format_zip(a.get()) != ARCHIVE_OK ||
        archive_write_open_filename(a.get(), tmp.c_str()) != ARCHIVE_OK)
        throw Error(ErrorCode::Io, out.string() + ": cannot write: " + archiveError(a.get()));
    const std::string manifest = plan.manifest.toJson();
    writeEntry(a.get(), kArchiveManifestName, manifest.size(), out);
    writeData(a.get(), manifest.data(), manifest.size(), kArchiveManifestName, out);
    writeEntry(a.get(), plan.manifest.project, plan.projectJson.size(), out);
    writeData(a.get(), plan.projectJson.data(), plan.projectJson.size(), plan.manifest.project, out);
    std::vector<char> buf(kChunk);
    for (const Planned &f : plan.files) {
        writeEntry(a.get(), f.file.path, f.file.bytes, out);
        std::ifstream in(f.source, std::ios::binary);
        if (!in)
            throw Error(ErrorCode::Io, f.source.string() + ": cannot read");
        Sha256Stream sha;
        uint64_t done = 0;
        while (in) {
            in.read(buf.data(), std::streamsize(buf.size()));
            const size_t n = size_t(in.gcount());
            if (n == 0)
                break;
            done += n;
            if (done > f.file.bytes)
                break;
            sha.add(buf.data(), n);
            writeData(a.get(), buf.data(), n, f.file.path, out);
        }
        if (done != f.file.bytes || sha.hex() != f.file.sha256)
            throw Error(ErrorCode::Io, f.source.string() + ": changed while it was archived; archive again");
    }
    if (archive_write_close(a.get()) != ARCHIVE_OK)
        throw Error(ErrorCode::Io, out.string() + ": cannot finish: " + archiveError(a.get()));
    a.reset();
    syncAndRename(tmp, out, out.string(), true);
    guard.keep();
    return plan.manifest;
}

namespace {

// Opens a zip for reading. Error(Io) / Error(Format) naming the archive.
ArchivePtr openZip(const fs::path &path)
{
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": not a file");
    ArchivePtr a(archive_read_new());
    if (!a || archive_read_support_format_zip(a.get()) != ARCHIVE_OK ||
        archive_read_support_filter_none(a.get()) != ARCHIVE_OK)
        throw Error(ErrorCode::Internal, "libarchive: cannot read zip files");
    if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
        throw Error(ErrorCode::Format, path.string() + ": not a run archive (" + archiveError(a.get()) + ")");
    return a;
}

// The manifest: the first entry, a regular file of at most kMaxManifestBytes.
ArchiveManifest readManifest(archive *a, const fs::path &path)
{
    archive_entry *e = nullptr;
    if (archive_read_next_header(a, &e) != ARCHIVE_OK)
        throw Error(ErrorCode::Format, path.string() + ": not a run archive (" + archiveError(a) + ")");
    const char *name = archive_entry_pathname(e);
    if (!name || std::string(name) != kArchiveManifestName)
        throw Error(ErrorCode::Format, path.string() + ": not a run archive (its first entry is '" +
                                           (name ? name : "") + "', not " + kArchiveManifestName + ")");
    if (archive_entry_filetype(e) != AE_IFREG)
        throw Error(ErrorCode::Format,
                    path.string() + ": " + kArchiveManifestName + " is not a regular file");
    std::string text;
    char buf[65536];
    for (;;) {
        const la_ssize_t n = archive_read_data(a, buf, sizeof buf);
        if (n < 0)
            throw Error(ErrorCode::Format,
                        path.string() + ": " + kArchiveManifestName + ": " + archiveError(a));
        if (n == 0)
            break;
        if (text.size() + size_t(n) > kMaxManifestBytes)
            throw Error(ErrorCode::Format,
                        path.string() + ": " + kArchiveManifestName + " is larger than 1 MiB");
        text.append(buf, size_t(n));
    }
    return ArchiveManifest::fromJson(text, path.string());
}

} // namespace

ArchiveManifest readArchiveManifest(const fs::path &archivePath)
{
    ArchivePtr a = openZip(archivePath);
    return readManifest(a.get(), archivePath);
}

ImportedRun importRunArchive(const fs::path &archivePath, const fs::path &into,
                             const std::map<std::string, fs::path> &remap)
{
    for (const auto &[role, path] : remap)
        if (role != "a" && role != "b" && role != "embedder")
            throw Error(ErrorCode::InvalidArgument, "model role '" + role + "' is not a, b or embedder");
    claimOutputDirectory(into, "--into", false);
    ArchivePtr a = openZip(archivePath);
    ImportedRun run;
    run.manifest = readManifest(a.get(), archivePath);
    const std::string where = archivePath.string();

    const fs::path target = fs::absolute(into).lexically_normal();
    const fs::path parent = target.parent_path();
    uint64_t total = 0;
    for (const ArchivedFile &f : run.manifest.files)
        total += f.bytes;
    std::error_code ec;
    const fs::space_info space = fs::space(parent, ec);
    if (!ec && space.available < total)
        throw Error(ErrorCode::Io, target.string() + ": the run needs " + std::to_string(total) +
                                       " bytes; the disk has " + std::to_string(space.available) + " free");
    std::random_device rd;
    const fs::path stage =
        parent / (".kvwb-import-" + std::to_string(rd()) + "-" + target.filename().string());
    fs::create_directories(stage, ec);
    if (ec)
        throw Error(ErrorCode::Io, stage.string() + ": cannot create: " + ec.message());
    TempPathGuard guard(stage);

    std::map<std::string, const ArchivedFile *> expected;
    for (const ArchivedFile &f : run.manifest.files)
        expected[f.path] = &f;
    std::vector<char> buf(kChunk);
    archive_entry *e = nullptr;
    for (;;) {
        const int rc = archive_read_next_header(a.get(), &e);
        if (rc == ARCHIVE_EOF)
            break;
        if (rc != ARCHIVE_OK)
            throw Error(ErrorCode::Format, where + ": " + archiveError(a.get()));
        const std::string name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
        const auto it = expected.find(name);
        if (it == expected.end())
            throw Error(ErrorCode::Format,
                        where + ": entry '" + name + "' is not in the manifest (or appears twice): refused");
        if (archive_entry_filetype(e) != AE_IFREG)
            throw Error(ErrorCode::Format, where + ": entry '" + name + "' is not a regular file: refused");
        const ArchivedFile &want = *it->second;
        expected.erase(it);
        const fs::path dest = (stage / name).lexically_normal();
        fs::create_directories(dest.parent_path(), ec);
        if (ec)
            throw Error(ErrorCode::Io, dest.parent_path().string() + ": cannot create: " + ec.message());
        std::ofstream out(dest, std::ios::binary | std::ios::trunc);
        if (!out)
            throw Error(ErrorCode::Io, dest.string() + ": cannot write");
        Sha256Stream sha;
        uint64_t got = 0;
        for (;;) {
            const la_ssize_t n = archive_read_data(a.get(), buf.data(), buf.size());
            if (n < 0)
                throw Error(ErrorCode::Format, where + ": entry '" + name + "': " + archiveError(a.get()));
            if (n == 0)
                break;
            got += uint64_t(n);
            if (got > want.bytes)
                throw Error(ErrorCode::Format, where + ": entry '" + name +
                                                   "' is longer than the manifest's " +
                                                   std::to_string(want.bytes) + " bytes");
            sha.add(buf.data(), size_t(n));
            out.write(buf.data(), n);
            if (!out)
                throw Error(ErrorCode::Io, dest.string() + ": write failed (disk full?)");
        }
        out.close();
        if (!out)
            throw Error(ErrorCode::Io, dest.string() + ": write failed");
        if (got != want.bytes)
            throw Error(ErrorCode::Format, where + ": entry '" + name + "' has " + std::to_string(got) +
                                               " bytes, the manifest says " + std::to_string(want.bytes));
        if (sha.hex() != want.sha256)
            throw Error(ErrorCode::Format,
                        where + ": entry '" + name + "' does not match its SHA-256 in the manifest: damaged");
    }
    if (!expected.empty())
        throw Error(ErrorCode::Format, where + ": entry '" + expected.begin()->first +
                                           "' is in the manifest but not in the archive");

    // Point the project at the models where they are here.
    const fs::path project = stage / run.manifest.project;
    Project p = Project::load(project);
    for (const auto &[role, path] : remap) {
        const fs::path abs = fs::absolute(path);
        if (role == "a")
            p.modelA.path = abs;
        else if (role == "b")
            p.modelB.path = abs;
        else
            p.replay.embedder = abs.string();
    }
    if (!remap.empty())
        p.save(project);

    fs::remove(target, ec); // an empty folder (claimOutputDirectory allowed nothing else)
    fs::rename(stage, target, ec);
    if (ec)
        throw Error(ErrorCode::Io, target.string() + ": cannot move the run into place: " + ec.message());
    guard.keep();
    run.project = target / run.manifest.project;
    const Project resolved = Project::load(run.project).resolved(run.project);
    const auto check = [&](const std::string &role, const fs::path &path) {
        std::error_code exists;
        if (!path.empty() && !fs::exists(path, exists))
            run.missingModels[role] = path.string();
    };
    check("a", resolved.modelA.path);
    check("b", resolved.modelB.path);
    if (!isBuiltinEmbedder(resolved.replay.embedder))
        check("embedder", resolved.replay.embedder);
    return run;
}

} // namespace kvwb::core
