#include "core/workload/workload_import.h"

#include "core/util/tsv_reader.h"

#include "core/util/error.h"
#include "core/util/text_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

namespace kvwb::core {

namespace {

// Warnings quote at most this much of a bad value: a megabyte-long field must not become a
// megabyte-long message.
constexpr size_t kQuoteBytes = 40;

std::string shortQuote(std::string_view s)
{
    return "'" + std::string(s.substr(0, kQuoteBytes)) + (s.size() > kQuoteBytes ? "...'" : "'");
}

bool full(const ImportResult &r, const ImportOptions &o)
{
    return o.limit > 0 && r.requests.size() >= o.limit;
}

// Error(Format) when nothing came out: the first warning says why.
void requireSome(const ImportResult &r, const std::string &sourceName, const char *records)
{
    if (!r.requests.empty())
        return;
    std::string message = sourceName + ": nothing to import (" + std::to_string(r.records) + " " + records;
    if (!r.warnings.empty())
        message +=
            ", " + std::to_string(r.warnings.total()) + " skipped; first: " + r.warnings.messages().front();
    throw Error(ErrorCode::Format, message + ")");
}

void checkOptions(const ImportOptions &o)
{
    if (o.gapMs < 0)
        throw Error(ErrorCode::InvalidArgument, "import gap " + std::to_string(o.gapMs) + " ms is negative");
    if (o.maxTokens < 1)
        throw Error(ErrorCode::InvalidArgument,
                    "import max tokens " + std::to_string(o.maxTokens) + " must be at least 1");
}

std::string readInput(const std::filesystem::path &path)
{
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": no such file");
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": not a regular file");
    if (std::filesystem::file_size(path, ec) == 0 && !ec)
        return {};
    return text::readWholeFile(path);
}

// ---- ShareGPT ----

enum class Role
{
    System,
    User,
    Assistant
};

struct Turn
{
    Role role;
    std::string text;
};

// The turns of one conversation, or a reason why it is malformed.
std::string readTurns(const nlohmann::json &record, std::vector<Turn> &turns)
{
    if (!record.is_object())
        return "not a JSON object";
    const auto it = record.find("conversations");
    if (it == record.end())
        return "no \"conversations\"";
    if (!it->is_array())
        return "\"conversations\" is not an array";
    bool seenUser = false;
    for (size_t j = 0; j < it->size(); ++j) {
        const nlohmann::json &t = (*it)[j];
        const std::string at = "turn " + std::to_string(j) + ": ";
        if (!t.is_object())
            return at + "not a JSON object";
        const auto from = t.find("from"), value = t.find("value");
        if (from == t.end() || !from->is_string())
            return at + "\"from\" is missing or not a string";
        if (value == t.end() || !value->is_string())
            return at + "\"value\" is missing or not a string";
        const std::string &f = from->get_ref<const std::string &>();
        Turn turn{Role::System, value->get<std::string>()};
        if (f == "human" || f == "user")
            turn.role = Role::User;
        else if (f == "gpt" || f == "assistant")
            turn.role = Role::Assistant;
        else if (f == "system")
            turn.role = Role::System;
        else
            return at + "unknown role " + shortQuote(f) + " (human, user, gpt, assistant, system)";
        if (turn.role == Role::System && seenUser)
            return at + "a system turn after the conversation started";
        if (turn.role == Role::User && turn.text.empty())
            return at + "empty human message";
        seenUser = seenUser || turn.role == Role::User;
        turns.push_back(std::move(turn));
    }
    if (!seenUser)
        return "no human turn";
    return {};
}

// The first words of a human turn, on one line: what the extractive summary says it asked.
std::string summaryTopic(const std::string &text)
{
    constexpr int kWords = 8;
    std::string out;
    int words = 0;
    bool in = false;
    for (char c : text) {
        const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (!space && !in && ++words > kWords) {
            out.pop_back(); // the space before this word
            return out + "...";
        }
        if (!space)
            out += c;
        else if (in)
            out += ' ';
        in = !space;
    }
    while (!out.empty() && out.back() == ' ')
        out.pop_back();
    return out;
}

} // namespace

ImportResult parseShareGpt(std::string_view json, const std::string &sourceName, const ImportOptions &options)
{
    checkOptions(options);
    if (options.historyPolicy.turns < 0)
        throw Error(ErrorCode::InvalidArgument, "import history policy turns must be >= 0");
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(json);
    } catch (const nlohmann::json::parse_error &e) {
        throw Error(ErrorCode::Format,
                    sourceName + ": not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what());
    } catch (const nlohmann::json::exception &e) { // e.g. a number too large for a double
        throw Error(ErrorCode::Format, sourceName + ": not usable JSON: " + e.what());
    }
    if (!doc.is_array())
        throw Error(ErrorCode::Format, sourceName + ": expected a JSON array of conversations, found a " +
                                           std::string(doc.type_name()));
    ImportResult result;
    const std::string tenant = options.tenant.empty() ? "sharegpt" : options.tenant;
    // Requests per conversation, in round order; ids and times are given once they are ordered.
    std::vector<std::vector<WorkloadRequest>> conversations;
    size_t pending = 0;
    const auto enough = [&]() {
        return options.interleave == 0 && options.limit > 0 && pending >= options.limit;
    };
    for (size_t i = 0; i < doc.size() && !enough(); ++i) {
        ++result.records;
        std::vector<Turn> turns;
        const std::string problem = readTurns(doc[i], turns);
        if (!problem.empty()) {
            const std::string message = sourceName + ":conversation " + std::to_string(i) + ": " + problem;
            if (options.strict)
                throw Error(ErrorCode::Format, message);
            result.warnings.add(message);
            continue;
        }
        // Rendering (docs/corpus-and-workload.md): system turns, joined by "\n", then "\n\n"; any
        // assistant turns before the first human one as "Assistant: {text}\n"; the earlier rounds
        // the history policy keeps, each "User: {text}\n" plus "Assistant: {text}\n" per answer;
        // then "User: {question}\nAssistant:". Under the full policy the prompt of every round is
        // a prefix of the next round's prompt.
        std::string system, preamble;
        std::vector<HistoryRound> rounds; // rounds so far, the last one possibly still open
        std::vector<WorkloadRequest> requests;
        const auto emit = [&](const std::string &question) {
            WorkloadRequest r;
            r.tenant = tenant;
            r.user = "c" + std::to_string(i);
            r.conversation = r.user;
            r.round = int(rounds.size());
            r.model = ModelRole::A;
            r.kind = RequestKind::New;
            r.maxTokens = options.maxTokens;
            r.question = question;
            PolicyHistory h = applyHistoryPolicy(options.historyPolicy, rounds);
            h.text = preamble + h.text;
            r.prompt = conversationPrompt(system, h, "User: " + question + "\nAssistant:");
            requests.push_back(std::move(r));
        };
        for (const Turn &t : turns) {
            if (t.role == Role::System) {
                system += (system.empty() ? "" : "\n") + t.text;
            } else if (t.role == Role::User) {
                if (options.maxRounds > 0 && rounds.size() >= options.maxRounds)
                    break;
                if (!enough() || options.interleave > 0) {
                    emit(t.text);
                    ++pending;
                }
                rounds.push_back({"User: " + t.text + "\n", summaryTopic(t.text)});
            } else if (rounds.empty()) {
                preamble += "Assistant: " + t.text + "\n";
            } else {
                rounds.back().text += "Assistant: " + t.text + "\n";
            }
        }
        conversations.push_back(std::move(requests));
    }
    const auto add = [&](WorkloadRequest &r) {
        if (full(result, options))
            return;
        r.id = int64_t(result.requests.size());
        r.tMs = r.id * options.gapMs;
        result.requests.push_back(std::move(r));
    };
    if (options.interleave == 0) {
        for (auto &c : conversations)
            for (auto &r : c)
                add(r);
    } else {
        for (size_t g = 0; g < conversations.size(); g += options.interleave) {
            const size_t end = std::min(conversations.size(), g + options.interleave);
            for (size_t round = 0;; ++round) {
                bool any = false;
                for (size_t c = g; c < end; ++c)
                    if (round < conversations[c].size()) {
                        add(conversations[c][round]);
                        any = true;
                    }
                if (!any)
                    break;
            }
        }
    }
    requireSome(result, sourceName, "conversations");
    return result;
}

ImportResult importShareGpt(const std::filesystem::path &path, const ImportOptions &options)
{
    return parseShareGpt(readInput(path), path.filename().string(), options);
}

// ---- Quora question pairs ----

namespace {

bool parseId(const std::string &s, int64_t &out)
{
    const char *end = s.data() + s.size();
    const auto [p, ec] = std::from_chars(s.data(), end, out);
    return !s.empty() && ec == std::errc() && p == end && out >= 0;
}

bool blank(const std::string &s)
{
    return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

} // namespace

ImportResult parseQuoraPairs(std::string_view tsv, const std::string &sourceName,
                             const ImportOptions &options)
{
    static const std::vector<std::string> kColumns = {"id",        "qid1",      "qid2",
                                                      "question1", "question2", "is_duplicate"};
    checkOptions(options);
    TsvReader reader(tsv);
    TsvRecord rec;
    if (!reader.next(rec) || !rec.problem.empty() || rec.fields != kColumns)
        throw Error(ErrorCode::Format, sourceName + ":1: expected the header \"" +
                                           text::join(kColumns, "\\t") + "\" (Quora question pairs TSV)");
    ImportResult result;
    const std::string tenant = options.tenant.empty() ? "quora" : options.tenant;
    const std::string systemPromptId = options.systemPrompt.empty() ? "" : tenant + "-system";
    while (!full(result, options) && reader.next(rec)) {
        if (rec.problem.empty() && rec.fields.size() == 1 && blank(rec.fields[0]))
            continue; // blank line
        ++result.records;
        const std::string where = sourceName + ":" + std::to_string(rec.line) + ": ";
        if (!rec.problem.empty()) {
            result.warnings.add(where + rec.problem);
            continue;
        }
        if (rec.fields.size() != kColumns.size()) {
            result.warnings.add(where + std::to_string(rec.fields.size()) + " fields, expected " +
                                std::to_string(kColumns.size()));
            continue;
        }
        int64_t id = 0, qid[2] = {0, 0};
        std::string problem;
        if (!parseId(rec.fields[0], id))
            problem = "id " + shortQuote(rec.fields[0]) + " is not a non-negative integer";
        else if (!parseId(rec.fields[1], qid[0]))
            problem = "qid1 " + shortQuote(rec.fields[1]) + " is not a non-negative integer";
        else if (!parseId(rec.fields[2], qid[1]))
            problem = "qid2 " + shortQuote(rec.fields[2]) + " is not a non-negative integer";
        else if (blank(rec.fields[3]))
            problem = "question1 is empty";
        else if (blank(rec.fields[4]))
            problem = "question2 is empty";
        else if (rec.fields[5] != "0" && rec.fields[5] != "1")
            problem = "is_duplicate " + shortQuote(rec.fields[5]) + " is not 0 or 1";
        if (!problem.empty()) {
            result.warnings.add(where + problem);
            continue;
        }
        const bool duplicate = rec.fields[5] == "1";
        const std::string &q1 = rec.fields[3], &q2 = rec.fields[4];
        int64_t first = -1;
        for (int k = 0; k < 2 && !full(result, options); ++k) {
            WorkloadRequest r;
            r.id = int64_t(result.requests.size());
            r.tMs = r.id * options.gapMs;
            r.tenant = tenant;
            r.user = "p" + std::to_string(id);
            r.model = ModelRole::A;
            r.systemPromptId = systemPromptId;
            r.maxTokens = options.maxTokens;
            r.question = k == 0 ? q1 : q2;
            r.prompt = requestPrompt(options.systemPrompt, r.question);
            // Duplicates share the first question's intent, so that a semantic hit between them is
            // right and one across a non-duplicate pair is a false hit.
            r.intent = "q" + std::to_string(duplicate ? qid[0] : qid[k]);
            if (k == 0) {
                first = r.id;
            } else {
                r.kind = q1 == q2    ? RequestKind::ExactRepeat
                         : duplicate ? RequestKind::Paraphrase
                                     : RequestKind::NearMiss;
                r.ref = first;
            }
            result.requests.push_back(std::move(r));
        }
    }
    requireSome(result, sourceName, "pairs");
    return result;
}

ImportResult importQuoraPairs(const std::filesystem::path &path, const ImportOptions &options)
{
    return parseQuoraPairs(readInput(path), path.filename().string(), options);
}

} // namespace kvwb::core
