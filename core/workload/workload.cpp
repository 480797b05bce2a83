#include "core/workload/workload.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/seeded_random.h"
#include "core/util/text_util.h"
#include "core/workload/corpus.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

namespace kvwb::core {

int wordCount(std::string_view s)
{
    int n = 0;
    bool in = false;
    for (char c : s) {
        const bool space = c == ' ' || c == '\n' || c == '\t';
        n += (!space && !in) ? 1 : 0;
        in = !space;
    }
    return n;
}

namespace {

int countWords(std::string_view s)
{
    return wordCount(s);
}

std::string capitalised(std::string s)
{
    if (!s.empty())
        s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
}

// A tenant's system prompts: a fixed header, then "A car is <definition>." sentences about concepts
// the tenant draws with its own seed. Every prompt is the shortest run of whole sentences from the
// start that reaches its word target, so a tenant's shorter prompts are prefixes of its longer
// ones (partial prefix-KV reuse) and different tenants share only the first words.
std::vector<SystemPrompt> tenantPrompts(int tenant, const std::vector<Concept> &concepts,
                                        const std::vector<int> &targets, uint64_t seed)
{
    const std::string name = "t" + std::to_string(tenant);
    SeededRandom rng(seed ^ (0x9E3779B97F4A7C15ull * uint64_t(tenant + 1)));
    std::vector<std::string> sentences = {"You are the assistant of tenant " + name + ".",
                                          "Answer in one short sentence."};
    const int longest = targets.empty() ? 0 : *std::max_element(targets.begin(), targets.end());
    int words = countWords(sentences[0]) + countWords(sentences[1]);
    for (int guard = 0; words < longest && !concepts.empty() && guard < 100000; ++guard) {
        const Concept &c = concepts[rng.below(concepts.size())];
        const std::string &lemma = c.lemmas.front();
        const std::string art = indefiniteArticle(lemma);
        std::string def = c.synset->definition;
        std::string s = capitalised(art.empty() ? lemma : art + " " + lemma) + " is " + def;
        if (s.back() != '.')
            s += '.';
        words += countWords(s);
        sentences.push_back(std::move(s));
    }
    std::vector<SystemPrompt> out;
    for (int target : targets) {
        SystemPrompt p;
        p.id = name + "-w" + std::to_string(target);
        p.tenant = name;
        for (const auto &s : sentences) {
            if (target <= 0 || p.words >= target)
                break;
            p.text += (p.text.empty() ? "" : " ") + s;
            p.words += countWords(s);
        }
        out.push_back(std::move(p));
    }
    return out;
}

void checkProbability(double p, const char *name)
{
    if (!(p >= 0.0 && p <= 1.0))
        throw Error(ErrorCode::InvalidArgument,
                    std::string("workload option ") + name + " must be in [0, 1], got " + std::to_string(p));
}

} // namespace

const char *requestKindName(RequestKind k)
{
    switch (k) {
    case RequestKind::New:
        return "new";
    case RequestKind::ExactRepeat:
        return "exact_repeat";
    case RequestKind::Paraphrase:
        return "paraphrase";
    case RequestKind::SynonymSwap:
        return "synonym_swap";
    case RequestKind::NearMiss:
        return "near_miss";
    }
    return "new";
}

bool parseRequestKind(std::string_view name, RequestKind &out)
{
    for (RequestKind k : {RequestKind::New, RequestKind::ExactRepeat, RequestKind::Paraphrase,
                          RequestKind::SynonymSwap, RequestKind::NearMiss}) {
        if (name == requestKindName(k)) {
            out = k;
            return true;
        }
    }
    return false;
}

std::string requestPrompt(std::string_view systemPrompt, std::string_view question)
{
    if (systemPrompt.empty())
        return promptFor(question);
    return std::string(systemPrompt) + "\n\n" + promptFor(question);
}

WorkloadGenerator::WorkloadGenerator(const WordNet &wordnet, WorkloadOptions options)
    : m_wordnet(wordnet), m_options(std::move(options))
{
    const auto &o = m_options;
    checkProbability(o.pRepeat, "p_repeat");
    checkProbability(o.pParaphrase, "p_paraphrase");
    checkProbability(o.pSynonym, "p_synonym");
    checkProbability(o.pNearMiss, "p_near_miss");
    checkProbability(o.fracB, "frac_b");
    const double sum = o.pRepeat + o.pParaphrase + o.pSynonym + o.pNearMiss;
    if (sum > 1.0 + 1e-9)
        throw Error(ErrorCode::InvalidArgument,
                    "workload options p_repeat + p_paraphrase + p_synonym + p_near_miss must be <= 1, got " +
                        std::to_string(sum));
    if (!(o.ratePerSecond > 0.0))
        throw Error(ErrorCode::InvalidArgument, "workload option rate must be > 0");
    if (!(o.zipfS >= 0.0))
        throw Error(ErrorCode::InvalidArgument, "workload option zipf must be >= 0");
    if (o.concepts < 1 || o.tenants < 1 || o.usersPerTenant < 1 || o.maxTokens < 1 || o.historyWindow < 1)
        throw Error(ErrorCode::InvalidArgument,
                    "workload options concepts, tenants, users, max_tokens and history must be >= 1");
    if (o.systemPromptWords.empty())
        throw Error(ErrorCode::InvalidArgument,
                    "workload needs at least one system prompt length (0 = none)");
    for (int w : o.systemPromptWords)
        if (w < 0)
            throw Error(ErrorCode::InvalidArgument, "system prompt word counts must be >= 0");
}

Workload WorkloadGenerator::generate() const
{
    const auto &o = m_options;
    const auto concepts = selectConcepts(m_wordnet, o.concepts, o.hypernymSentence);
    if (concepts.empty())
        throw Error(ErrorCode::Config, m_wordnet.dir().string() + ": no usable noun concepts for a workload");
    const auto &templates = questionTemplates();

    // Co-hyponyms among the selected concepts only: a near miss must be a concept the models know.
    std::unordered_map<std::string, size_t> indexOf;
    for (size_t i = 0; i < concepts.size(); ++i)
        indexOf.emplace(concepts[i].synset->id, i);
    std::vector<std::vector<size_t>> siblings(concepts.size());
    for (size_t i = 0; i < concepts.size(); ++i)
        for (const Synset *s : m_wordnet.siblings(*concepts[i].synset))
            if (const auto it = indexOf.find(s->id); it != indexOf.end())
                siblings[i].push_back(it->second);

    Workload w;
    w.concepts = concepts.size();
    std::vector<std::vector<SystemPrompt>> prompts;
    for (int t = 0; t < o.tenants; ++t) {
        prompts.push_back(tenantPrompts(t, concepts, o.systemPromptWords, o.seed));
        w.systemPrompts.insert(w.systemPrompts.end(), prompts.back().begin(), prompts.back().end());
    }

    SeededRandom rng(o.seed);
    const ZipfTable zipf(concepts.size(), o.zipfS);
    struct Drawn
    {
        size_t conceptIdx, tmpl, lemma, prompt;
    };
    std::vector<Drawn> drawn;
    drawn.reserve(o.requests);
    std::vector<std::vector<size_t>> history(size_t(o.tenants));
    const double c1 = o.pRepeat, c2 = c1 + o.pParaphrase, c3 = c2 + o.pSynonym, c4 = c3 + o.pNearMiss;
    double tSeconds = 0;
    w.requests.reserve(o.requests);

    for (size_t i = 0; i < o.requests; ++i) {
        tSeconds += rng.exponential(o.ratePerSecond);
        const size_t tenant = rng.below(size_t(o.tenants));
        const double u = rng.uniform();
        WorkloadRequest r;
        r.id = int64_t(i);
        r.tMs = int64_t(tSeconds * 1000.0);
        r.tenant = "t" + std::to_string(tenant);
        r.user =
            "u" + std::to_string(tenant * size_t(o.usersPerTenant) + rng.below(size_t(o.usersPerTenant)));
        r.maxTokens = o.maxTokens;
        auto &hist = history[tenant];
        const auto pickBase = [&]() {
            const size_t window = std::min(hist.size(), o.historyWindow);
            return hist[hist.size() - 1 - rng.below(window)];
        };
        Drawn d{};
        bool done = false;
        if (!hist.empty() && u < c4) {
            if (u < c1) {
                const size_t b = pickBase();
                const WorkloadRequest &base = w.requests[b];
                r.kind = RequestKind::ExactRepeat;
                r.ref = base.id;
                r.model = base.model;
                r.systemPromptId = base.systemPromptId;
                r.intent = base.intent;
                r.templateId = base.templateId;
                r.lemma = base.lemma;
                r.question = base.question;
                r.prompt = base.prompt;
                r.maxTokens = base.maxTokens;
                d = drawn[b];
                done = true;
            } else {
                // A follow-up in the same context as its base: same system prompt and model.
                // Bases that cannot be varied (one lemma, no known sibling) are retried a few times.
                const RequestKind kind = u < c2   ? RequestKind::Paraphrase
                                         : u < c3 ? RequestKind::SynonymSwap
                                                  : RequestKind::NearMiss;
                for (int attempt = 0; attempt < 8 && !done; ++attempt) {
                    const size_t b = pickBase();
                    const Drawn &bd = drawn[b];
                    d = bd;
                    if (kind == RequestKind::Paraphrase) {
                        const size_t k = rng.below(templates.size() - 1);
                        d.tmpl = k >= bd.tmpl ? k + 1 : k;
                    } else if (kind == RequestKind::SynonymSwap) {
                        const size_t L = concepts[bd.conceptIdx].lemmas.size();
                        if (L < 2)
                            continue;
                        const size_t k = rng.below(L - 1);
                        d.lemma = k >= bd.lemma ? k + 1 : k;
                    } else {
                        const auto &sib = siblings[bd.conceptIdx];
                        if (sib.empty())
                            continue;
                        d.conceptIdx = sib[rng.below(sib.size())];
                        d.lemma = rng.below(concepts[d.conceptIdx].lemmas.size());
                    }
                    r.kind = kind;
                    r.ref = w.requests[b].id;
                    r.model = w.requests[b].model;
                    done = true;
                }
            }
        }
        if (!done) {
            d.conceptIdx = zipf.sample(rng);
            d.tmpl = rng.below(templates.size());
            d.lemma = rng.below(concepts[d.conceptIdx].lemmas.size());
            d.prompt = rng.below(o.systemPromptWords.size());
            r.kind = RequestKind::New;
            r.ref = -1;
            r.model = rng.chance(o.fracB) ? ModelRole::B : ModelRole::A;
        }
        if (r.kind != RequestKind::ExactRepeat) {
            const Concept &c = concepts[d.conceptIdx];
            const SystemPrompt &sp = prompts[tenant][d.prompt];
            r.systemPromptId = sp.id;
            r.intent = c.synset->id;
            r.templateId = templates[d.tmpl].id;
            r.lemma = c.lemmas[d.lemma];
            r.question = renderQuestion(templates[d.tmpl], r.lemma);
            r.prompt = requestPrompt(sp.text, r.question);
        }
        hist.push_back(i);
        drawn.push_back(d);
        w.requests.push_back(std::move(r));
    }
    return w;
}

std::string workloadToJsonl(const std::vector<WorkloadRequest> &requests)
{
    std::string out;
    for (const auto &r : requests) {
        nlohmann::ordered_json j;
        j["id"] = r.id;
        j["t_ms"] = r.tMs;
        j["tenant"] = r.tenant;
        j["user"] = r.user;
        if (!r.conversation.empty())
            j["conversation"] = r.conversation;
        if (r.round >= 0)
            j["round"] = r.round;
        j["model"] = roleName(r.model);
        j["system_prompt_id"] = r.systemPromptId;
        j["kind"] = requestKindName(r.kind);
        j["intent"] = r.intent;
        j["template"] = r.templateId;
        j["lemma"] = r.lemma;
        j["ref"] = r.ref;
        j["max_tokens"] = r.maxTokens;
        j["question"] = r.question;
        j["prompt"] = r.prompt;
        out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
    }
    return out;
}

void writeWorkloadJsonl(const std::filesystem::path &path, const std::vector<WorkloadRequest> &requests)
{
    writeFileAtomic(path, workloadToJsonl(requests));
}

WorkloadReadResult parseWorkloadJsonl(std::string_view text, const std::string &sourceName,
                                      size_t maxWarnings)
{
    using nlohmann::json;
    WorkloadReadResult result;
    result.warnings = WarningList(maxWarnings);
    text::forEachLine(text, [&](size_t lineNo, std::string_view line) {
        if (line.find_first_not_of(" \t\r") == std::string_view::npos)
            return true;
        ++result.lines;
        const std::string where = sourceName + ":" + std::to_string(lineNo) + ": ";
        json j;
        try {
            j = json::parse(line);
        } catch (const json::parse_error &e) {
            result.warnings.add(where + "not valid JSON (byte " + std::to_string(e.byte) + ")");
            return true;
        } catch (const json::exception &e) { // e.g. a number too large for a double: 1e46333
            result.warnings.add(where + "not usable JSON (" + e.what() + ")");
            return true;
        }
        if (!j.is_object()) {
            result.warnings.add(where + "not a JSON object");
            return true;
        }
        std::string problem;
        const auto fail = [&](const char *field, const char *must) {
            if (problem.empty())
                problem = std::string("field '") + field + "' " + must;
        };
        const auto str = [&](const char *field, std::string &out, bool required, bool nonEmpty) {
            const auto it = j.find(field);
            if (it == j.end()) {
                if (required)
                    fail(field, "is missing");
                return;
            }
            if (!it->is_string() || (nonEmpty && it->get_ref<const std::string &>().empty()))
                return fail(field, nonEmpty ? "must be a non-empty string" : "must be a string");
            out = it->get<std::string>();
        };
        const auto integer = [&](const char *field, int64_t &out, bool required, int64_t min,
                                 const char *must) {
            const auto it = j.find(field);
            if (it == j.end()) {
                if (required)
                    fail(field, "is missing");
                return;
            }
            if (!it->is_number_integer() || it->get<int64_t>() < min ||
                (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)))
                return fail(field, must);
            out = it->get<int64_t>();
        };
        WorkloadRequest r;
        r.id = int64_t(result.requests.size());
        integer("id", r.id, false, 0, "must be a non-negative integer");
        integer("t_ms", r.tMs, true, 0, "must be a non-negative integer");
        if (r.tMs > kMaxArrivalMs) // `replay --clock` would wait that long (1e15 ms: 31,000 years)
            fail("t_ms", "is beyond 30 days (2592000000 ms), the latest arrival time kvwb replays");
        str("tenant", r.tenant, true, true);
        str("user", r.user, true, true);
        str("conversation", r.conversation, false, false);
        int64_t round = -1;
        integer("round", round, false, 0, "must be a non-negative integer");
        if (round > INT32_MAX)
            fail("round", "must be a non-negative integer");
        r.round = int(round);
        std::string model;
        str("model", model, true, true);
        if (problem.empty()) {
            if (const auto role = parseRole(model))
                r.model = *role;
            else
                fail("model", "must be \"a\" or \"b\"");
        }
        str("system_prompt_id", r.systemPromptId, false, false);
        std::string kind = "new";
        str("kind", kind, false, true);
        if (problem.empty() && !parseRequestKind(kind, r.kind))
            fail("kind", "must be one of new, exact_repeat, paraphrase, synonym_swap, near_miss");
        str("intent", r.intent, true, false); // "" = unknown (imported workloads)
        str("template", r.templateId, false, false);
        str("lemma", r.lemma, false, false);
        integer("ref", r.ref, false, -1, "must be an integer >= -1");
        int64_t maxTokens = 0;
        integer("max_tokens", maxTokens, true, 1, "must be a positive integer");
        if (maxTokens > INT32_MAX)
            fail("max_tokens", "must be a positive integer");
        r.maxTokens = int(maxTokens);
        str("question", r.question, false, false);
        str("prompt", r.prompt, true, true);
        if (!problem.empty()) {
            result.warnings.add(where + problem);
            return true;
        }
        result.requests.push_back(std::move(r));
        return true;
    });
    return result;
}

WorkloadReadResult readWorkloadJsonl(const std::filesystem::path &path, size_t maxWarnings)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": workload file not found");
    return parseWorkloadJsonl(text::readWholeFile(path), path.filename().string(), maxWarnings);
}

} // namespace kvwb::core
