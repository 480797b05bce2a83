#include "app/jobs/handoff_job.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace kvwb::app::jobs {

using core::Error;
using core::ErrorCode;

std::vector<Conversation> conversationsOf(const std::vector<core::WorkloadRequest> &requests,
                                          std::vector<std::string> &warnings)
{
    std::vector<Conversation> groups;
    std::vector<bool> broken;
    std::map<std::pair<std::string, std::string>, size_t> index;
    size_t skipped = 0;
    std::string first;
    for (const auto &r : requests) {
        const auto key = std::make_pair(r.tenant, r.user);
        auto it = index.find(key);
        if (it == index.end()) {
            it = index.emplace(key, groups.size()).first;
            groups.push_back({r.tenant + "/" + r.user, {}, {}});
            broken.push_back(false);
        }
        Conversation &c = groups[it->second];
        if (broken[it->second])
            continue;
        if (!c.prompts.empty() && (r.prompt.size() <= c.prompts.back().size() ||
                                   r.prompt.compare(0, c.prompts.back().size(), c.prompts.back()) != 0)) {
            broken[it->second] = true;
            if (skipped++ == 0)
                first =
                    fmt::format("{}: request {}'s prompt does not extend the one before it", c.name, r.id);
            continue;
        }
        c.prompts.push_back(r.prompt);
        c.questions.push_back(r.question);
    }
    if (skipped > 0)
        warnings.push_back(fmt::format("{} of {} tenant/user groups are not conversations and were skipped "
                                       "(first: {})",
                                       skipped, groups.size(), first));
    std::vector<Conversation> out;
    for (size_t i = 0; i < groups.size(); ++i)
        if (!broken[i])
            out.push_back(std::move(groups[i]));
    return out;
}

namespace {

// What the next turn's prompt adds after this one's, up to the next question: the answer to this
// turn (with its leading space), as the ShareGPT import renders conversations; all of it otherwise.
std::string answerOf(const std::string &prompt, const std::string &next, const std::string &nextQuestion)
{
    const std::string added = next.substr(prompt.size());
    const std::string tail = "\nUser: " + nextQuestion + "\nAssistant:";
    if (!nextQuestion.empty() && added.size() >= tail.size() &&
        added.compare(added.size() - tail.size(), tail.size(), tail) == 0)
        return added.substr(0, added.size() - tail.size());
    return added;
}

} // namespace

HandoffOutcome runHandoff(const gpu::Model &a, const core::Tokenizer &tokA, const gpu::Model &b,
                          const core::Tokenizer &tokB, const gpu::Converter &converter,
                          const Conversation &conversation, const HandoffSettings &settings)
{
    const int k = settings.handoffTurn;
    if (k < 1)
        throw Error(ErrorCode::InvalidArgument, fmt::format("hand-off turn {} must be at least 1", k));
    const int available = int(conversation.prompts.size());
    const int turns = settings.maxTurns > 0 ? std::min(settings.maxTurns, available) : available;
    if (turns < k + 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{} turn(s): a hand-off after turn {} needs at least {}", turns, k, k + 1));
    const std::string &full = conversation.prompts[size_t(turns) - 1];
    std::vector<int> tokens = tokB.encode(full, true);
    if (tokA.encode(full, true) != tokens)
        throw Error(ErrorCode::InvalidArgument,
                    "A and B tokenise it differently: a transfer needs the same tokens");
    // tokens of a prefix of the transcript, which must tokenise as a prefix of its tokens
    const auto boundary = [&](const std::string &text, int turn) {
        const auto ids = tokB.encode(text, true);
        if (ids.size() > tokens.size() || !std::equal(ids.begin(), ids.end(), tokens.begin()))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("turn {} does not tokenise as a prefix of the conversation", turn));
        return int(ids.size());
    };
    std::vector<int> promptEnd, answerEnd; // [turns], [turns - 1]
    for (int j = 0; j < turns; ++j)
        promptEnd.push_back(boundary(conversation.prompts[size_t(j)], j + 1));
    for (int j = 0; j + 1 < turns; ++j)
        answerEnd.push_back(
            boundary(conversation.prompts[size_t(j)] + answerOf(conversation.prompts[size_t(j)],
                                                                conversation.prompts[size_t(j) + 1],
                                                                conversation.questions[size_t(j) + 1]),
                     j + 1));
    const int limit = std::min(a.contextLimit(), b.contextLimit());
    if (int(tokens.size()) + settings.maxTokens > limit)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{} tokens and {} to generate do not fit the context of {}", tokens.size(),
                                settings.maxTokens, limit));
    gpu::GenerateOptions go;
    go.maxTokens = settings.maxTokens;
    const auto answer = b.generate(tokens, go).outputIds; // B's own answer to the last turn
    const int lastPrompt = int(tokens.size());
    tokens.insert(tokens.end(), answer.begin(), answer.end());
    // A served turns 1..k and holds everything through its answer to turn k; B computes at least the
    // last token of turn k + 1's prompt itself
    HandoffOutcome out;
    out.transcriptTokens = int(tokens.size());
    out.handoffTokens = std::min(answerEnd[size_t(k) - 1], promptEnd[size_t(k)] - 1);
    std::vector<std::pair<int, int>> spans;
    std::vector<int> numbers;
    for (int j = k; j < turns; ++j) {
        const int begin = promptEnd[size_t(j)];
        const int end = j + 1 < turns ? answerEnd[size_t(j)] : lastPrompt + int(answer.size());
        if (end > begin) {
            spans.emplace_back(begin, end);
            numbers.push_back(j + 1);
        }
    }
    if (spans.empty())
        throw Error(ErrorCode::InvalidArgument, fmt::format("no answer tokens after turn {}", k));
    const auto agreements = gpu::handoffAgreement(a, b, converter, tokens, out.handoffTokens, spans);
    for (size_t i = 0; i < spans.size(); ++i) {
        HandoffTurn t;
        t.turn = numbers[i];
        t.answerTokens = spans[i].second - spans[i].first;
        t.meanKl = agreements[i].meanKl();
        t.top1 = agreements[i].top1Rate();
        t.kl = agreements[i].kl;
        out.turns.push_back(std::move(t));
    }
    return out;
}

} // namespace kvwb::app::jobs
