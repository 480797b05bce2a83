#include "core/store/comparison_store.h"

#include "core/metrics/text_metrics.h"
#include "core/store/hdf5_handle.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvwb::core {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char *kComparisons = "/comparisons";
constexpr const char *kSamples = "samples";
constexpr const char *kSchema = "kvwb-comparisons/1";

// ---- validation: the same rules on save (InvalidArgument) and on load (Format) ----

void checkFinite(const std::string &where, const std::string &field, double v, ErrorCode code)
{
    if (!std::isfinite(v))
        throw Error(code, fmt::format("{} {} is {}, expected a finite number", where, field, v));
}

void checkNonNegative(const std::string &where, const std::string &field, int v, ErrorCode code)
{
    if (v < 0)
        throw Error(code, fmt::format("{} {} is {}, expected >= 0", where, field, v));
}

void checkPath(const std::string &where, const char *name, const ComparisonPath &p, size_t scratchIds,
               bool transfer, ErrorCode code)
{
    const std::string at = where + " " + name;
    if (p.pieces.size() != p.ids.size())
        throw Error(code, fmt::format("{}.pieces has {} entries, expected one per id ({})", at,
                                      p.pieces.size(), p.ids.size()));
    if (p.logprobs.size() != p.ids.size())
        throw Error(code, fmt::format("{}.logprobs has {} entries, expected one per id ({})", at,
                                      p.logprobs.size(), p.ids.size()));
    if (!transfer && !p.kl.empty())
        throw Error(code, fmt::format("{}.kl has {} entries, expected none (only the transfer path has "
                                      "per-token KL)",
                                      at, p.kl.size()));
    if (transfer && !p.kl.empty() && p.kl.size() != scratchIds)
        throw Error(code, fmt::format("{}.kl has {} entries, expected none or one per scratch id ({})", at,
                                      p.kl.size(), scratchIds));
    for (size_t i = 0; i < p.logprobs.size(); ++i)
        if (!std::isfinite(p.logprobs[i]))
            throw Error(code,
                        fmt::format("{}.logprobs[{}] is {}, expected a finite number", at, i, p.logprobs[i]));
    for (size_t i = 0; i < p.kl.size(); ++i)
        if (!std::isfinite(p.kl[i]))
            throw Error(code, fmt::format("{}.kl[{}] is {}, expected a finite number", at, i, p.kl[i]));
    const std::string field = std::string(name) + ".";
    checkNonNegative(where, field + "prompt_tokens", p.promptTokens, code);
    checkNonNegative(where, field + "reused_tokens", p.reusedTokens, code);
    checkFinite(where, field + "ttft_ms", p.ttftMs, code);
    checkFinite(where, field + "decode_tok_per_s", p.decodeTokPerS, code);
}

// where: "<file>: comparisons <name> sample <i>"
void checkSample(const std::string &where, const ComparisonSample &s, ErrorCode code)
{
    checkPath(where, "a", s.a, s.scratch.ids.size(), false, code);
    checkPath(where, "scratch", s.scratch, s.scratch.ids.size(), false, code);
    checkPath(where, "transfer", s.transfer, s.scratch.ids.size(), true, code);
    const int longest = int(std::max(s.scratch.ids.size(), s.transfer.ids.size()));
    if (s.firstDivergence < -1 || s.firstDivergence > longest)
        throw Error(code, fmt::format("{} first_divergence is {}, expected -1 (identical) to {}", where,
                                      s.firstDivergence, longest));
    const std::pair<const char *, double> numbers[] = {{"mean_kl", s.meanKl},
                                                       {"top1", s.top1},
                                                       {"kl_no_prefix", s.klNoPrefix},
                                                       {"rouge_l", s.rougeL},
                                                       {"source_prefill_ms", s.sourcePrefillMs},
                                                       {"convert_ms", s.convertMs},
                                                       {"gate.value", s.gateValue},
                                                       {"gate.threshold", s.gateThreshold}};
    for (const auto &[field, v] : numbers)
        checkFinite(where, field, v, code);
}

// ---- JSON form of one sample ----

// Text as a JSON string when it is valid UTF-8, else as an array of its bytes: a byte-level BPE
// piece may hold part of a multi-byte character, and JSON strings cannot carry that losslessly.
json textJson(const std::string &s)
{
    if (!text::firstInvalidUtf8(s))
        return s;
    json bytes = json::array();
    for (unsigned char c : s)
        bytes.push_back(int(c));
    return bytes;
}

// Text with every invalid UTF-8 byte replaced by U+FFFD (for readers that need valid strings).
json lossyTextJson(const std::string &s)
{
    std::string out;
    std::string_view rest = s;
    while (const auto bad = text::firstInvalidUtf8(rest)) {
        out.append(rest.substr(0, *bad));
        out.append("\xEF\xBF\xBD");
        rest.remove_prefix(*bad + 1);
    }
    out.append(rest);
    return out;
}

using TextJson = json (*)(const std::string &);

json pathJson(const ComparisonPath &p, bool transfer, TextJson text)
{
    json pieces = json::array();
    for (const auto &piece : p.pieces)
        pieces.push_back(text(piece));
    json j = {{"ids", p.ids},
              {"pieces", pieces},
              {"logprobs", p.logprobs},
              {"text", text(p.text)},
              {"prompt_tokens", p.promptTokens},
              {"reused_tokens", p.reusedTokens},
              {"ttft_ms", p.ttftMs},
              {"decode_tok_per_s", p.decodeTokPerS}};
    if (transfer)
        j["kl"] = p.kl;
    return j;
}

json sampleJson(const ComparisonSample &s, TextJson text = textJson)
{
    json j = {{"prompt", text(s.prompt)},
              {"converter", text(s.converter)},
              {"a", pathJson(s.a, false, text)},
              {"scratch", pathJson(s.scratch, false, text)},
              {"transfer", pathJson(s.transfer, true, text)},
              {"first_divergence", s.firstDivergence},
              {"mean_kl", s.meanKl},
              {"top1", s.top1},
              {"kl_no_prefix", s.klNoPrefix},
              {"rouge_l", s.rougeL},
              {"source_prefill_ms", s.sourcePrefillMs},
              {"convert_ms", s.convertMs},
              {"gate",
               {{"signal", s.gateSignal},
                {"value", s.gateValue},
                {"threshold", s.gateThreshold},
                {"passed", s.gatePassed}}},
              {"created_utc", s.createdUtc}};
    if (!s.expectedAnswer.empty()) // optional: lists written before it have none
        j["expected_answer"] = text(s.expectedAnswer);
    return j;
}

// Reading back: every field is required and typed; Error(Format) "<where> <field> ...".
class Reader
{
public:
    explicit Reader(std::string where) : m_where(std::move(where)) {}

    const json &get(const json &obj, const std::string &prefix, const char *key) const
    {
        if (!obj.is_object() || !obj.contains(key))
            throw Error(ErrorCode::Format, m_where + " " + prefix + key + " is missing");
        return obj.at(key);
    }
    [[noreturn]] void bad(const std::string &field, const char *expected) const
    {
        throw Error(ErrorCode::Format, m_where + " " + field + " is not " + expected);
    }
    std::string text(const json &v, const std::string &field) const
    {
        if (v.is_string())
            return v.get<std::string>();
        if (!v.is_array())
            bad(field, "a string");
        std::string s;
        for (const json &b : v) {
            if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > 255)
                bad(field, "a string or an array of bytes");
            s += char(b.get<int>());
        }
        return s;
    }
    std::string text(const json &obj, const std::string &prefix, const char *key) const
    {
        return text(get(obj, prefix, key), prefix + key);
    }
    std::string string(const json &obj, const std::string &prefix, const char *key) const
    {
        const json &v = get(obj, prefix, key);
        if (!v.is_string())
            bad(prefix + key, "a string");
        return v.get<std::string>();
    }
    double number(const json &obj, const std::string &prefix, const char *key) const
    {
        const json &v = get(obj, prefix, key);
        if (!v.is_number())
            bad(prefix + key, "a number"); // NaN and infinities were refused on save; JSON has none
        return v.get<double>();
    }
    int integer(const json &obj, const std::string &prefix, const char *key) const
    {
        const json &v = get(obj, prefix, key);
        if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int>::min() ||
            v.get<int64_t>() > std::numeric_limits<int>::max())
            bad(prefix + key, "a 32-bit integer");
        return v.get<int>();
    }
    bool boolean(const json &obj, const std::string &prefix, const char *key) const
    {
        const json &v = get(obj, prefix, key);
        if (!v.is_boolean())
            bad(prefix + key, "true or false");
        return v.get<bool>();
    }
    template <typename T>
    std::vector<T> numbers(const json &obj, const std::string &prefix, const char *key) const
    {
        const json &v = get(obj, prefix, key);
        const std::string field = prefix + key;
        if (!v.is_array())
            bad(field, "an array");
        std::vector<T> out;
        out.reserve(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
            const json &e = v[i];
            if constexpr (std::is_integral_v<T>) {
                if (!e.is_number_integer() || e.get<int64_t>() < std::numeric_limits<T>::min() ||
                    e.get<int64_t>() > std::numeric_limits<T>::max())
                    bad(fmt::format("{}[{}]", field, i), "a 32-bit integer");
            } else if (!e.is_number()) {
                bad(fmt::format("{}[{}]", field, i), "a number");
            }
            out.push_back(e.get<T>());
        }
        return out;
    }

    ComparisonPath path(const json &s, const char *name, bool transfer) const
    {
        const json &j = get(s, "", name);
        const std::string p = std::string(name) + ".";
        if (!j.is_object())
            bad(name, "an object");
        ComparisonPath out;
        out.ids = numbers<int>(j, p, "ids");
        const json &pieces = get(j, p, "pieces");
        if (!pieces.is_array())
            bad(p + "pieces", "an array");
        for (size_t i = 0; i < pieces.size(); ++i)
            out.pieces.push_back(text(pieces[i], fmt::format("{}pieces[{}]", p, i)));
        out.logprobs = numbers<float>(j, p, "logprobs");
        if (transfer)
            out.kl = numbers<double>(j, p, "kl");
        out.text = text(j, p, "text");
        out.promptTokens = integer(j, p, "prompt_tokens");
        out.reusedTokens = integer(j, p, "reused_tokens");
        out.ttftMs = number(j, p, "ttft_ms");
        out.decodeTokPerS = number(j, p, "decode_tok_per_s");
        return out;
    }

    ComparisonSample sample(const json &j) const
    {
        if (!j.is_object())
            throw Error(ErrorCode::Format, m_where + " is not a JSON object");
        ComparisonSample s;
        s.prompt = text(j, "", "prompt");
        s.converter = text(j, "", "converter");
        s.a = path(j, "a", false);
        s.scratch = path(j, "scratch", false);
        s.transfer = path(j, "transfer", true);
        s.firstDivergence = integer(j, "", "first_divergence");
        s.meanKl = number(j, "", "mean_kl");
        s.top1 = number(j, "", "top1");
        s.klNoPrefix = number(j, "", "kl_no_prefix");
        s.rougeL = number(j, "", "rouge_l");
        s.sourcePrefillMs = number(j, "", "source_prefill_ms");
        s.convertMs = number(j, "", "convert_ms");
        const json &gate = get(j, "", "gate");
        if (!gate.is_object())
            bad("gate", "an object");
        s.gateSignal = string(gate, "gate.", "signal");
        s.gateValue = number(gate, "gate.", "value");
        s.gateThreshold = number(gate, "gate.", "threshold");
        s.gatePassed = boolean(gate, "gate.", "passed");
        s.createdUtc = string(j, "", "created_utc");
        if (j.contains("expected_answer"))
            s.expectedAnswer = text(j, "", "expected_answer");
        return s;
    }

private:
    std::string m_where;
};

std::string sampleWhere(const std::string &file, const std::string &name, size_t i)
{
    return fmt::format("{}: comparisons {} sample {}", file, name, i);
}

} // namespace

// ---------------------------------------------------------------------------------------------------

void saveComparisons(const fs::path &experiment, const std::string &name,
                     const std::vector<ComparisonSample> &samples)
{
    h5::prepareLibrary();
    const std::string file = experiment.string();
    h5::checkName(file, "comparison list", name);
    std::vector<std::string> texts;
    texts.reserve(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        checkSample(sampleWhere(file, name, i), samples[i], ErrorCode::InvalidArgument);
        texts.push_back(sampleJson(samples[i]).dump(-1, ' ', false));
    }
    h5::openExperiment(experiment); // a kvwb experiment, checked read-only before it is opened for writing

    h5::Save save(experiment);
    const std::string target = std::string(kComparisons) + "/" + name;
    {
        const h5::PropList gcpl = h5::compactGroupCreation();
        const h5::Group root(h5::check(H5Gcreate_anon(save.file(), gcpl.get(), H5P_DEFAULT), ErrorCode::Io,
                                       file + ": cannot create group " + target));
        const h5::Place place{root.get(), file, target};
        const h5::Site site(file, target);
        h5::writeAttr(root.get(), site, "schema", std::string(kSchema));
        h5::writeAttr(root.get(), site, "count", int64_t(samples.size()));
        h5::writeAttr(root.get(), site, "created_utc", text::utcNowIso8601());
        h5::writeAttr(root.get(), site, "app_version", std::string(appVersion()));
        h5::writeAttr(root.get(), site, "git_commit", std::string(gitCommit()));
        h5::writeStrings(place, kSamples, texts);
        save.link(root.get(), kComparisons,
                  "Comparison samples: one group per saved list, one JSON document per sample "
                  "(docs/experiment-format.md)",
                  name);
    }
    save.close();
}

std::vector<std::string> listComparisons(const fs::path &experiment)
{
    return h5::recordNames(experiment, kComparisons);
}

std::vector<ComparisonSample> loadComparisons(const fs::path &experiment, const std::string &name)
{
    const h5::RecordFile record = h5::openRecord(experiment, kComparisons, "comparison list", name);
    const std::string &file = record.file, &base = record.path;
    const hid_t fid = record.handle.get();
    int64_t count = 0;
    {
        const h5::Group g = h5::openGroup(fid, file, base);
        const h5::Site site(file, base);
        const std::string schema = h5::readStringAttr(g.get(), site, "schema");
        if (schema != kSchema)
            throw Error(schema.rfind("kvwb-comparisons/", 0) == 0 ? ErrorCode::Unsupported
                                                                  : ErrorCode::Format,
                        site.attr("schema") + " is '" + schema + "', expected " + kSchema);
        count = h5::readIntAttr(g.get(), site, "count");
    }
    const std::string samplesPath = base + "/" + kSamples;
    const std::vector<std::string> texts = h5::readStrings(fid, file, samplesPath);
    if (int64_t(texts.size()) != count)
        throw Error(ErrorCode::Format, file + ": dataset " + samplesPath + " has " +
                                           std::to_string(texts.size()) + " entries, attribute count of " +
                                           base + " says " + std::to_string(count));
    std::vector<ComparisonSample> samples;
    samples.reserve(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        const std::string where = sampleWhere(file, name, i);
        json j;
        try {
            j = json::parse(texts[i]);
        } catch (const json::exception &e) {
            throw Error(ErrorCode::Format, file + ": dataset " + samplesPath + " entry " + std::to_string(i) +
                                               " is not JSON: " + e.what());
        }
        ComparisonSample s = Reader(where).sample(j);
        checkSample(where, s, ErrorCode::Format);
        samples.push_back(std::move(s));
    }
    return samples;
}

std::optional<AnswerHits> answerHits(const ComparisonSample &s)
{
    if (s.expectedAnswer.empty())
        return std::nullopt;
    return AnswerHits{answerFound(s.scratch.text, s.expectedAnswer),
                      answerFound(s.transfer.text, s.expectedAnswer),
                      answerFound(s.a.text, s.expectedAnswer)};
}

std::string comparisonSampleJson(const ComparisonSample &sample)
{
    return sampleJson(sample, lossyTextJson).dump();
}

void checkComparisonName(const std::filesystem::path &experiment, const std::string &name)
{
    h5::checkName(experiment.string(), "comparison list", name);
}

} // namespace kvwb::core
