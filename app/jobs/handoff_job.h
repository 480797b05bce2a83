// Multi-turn hand-off set-up for `kvwb compare --handoff`: conversations read from a workload file
// (the requests of one tenant and user whose prompts grow turn by turn, as `kvwb workload
// sharegpt` writes them), each turned into one token transcript, the point where model A hands the
// conversation to model B (after A's answer to turn K) and the answer tokens of every later turn,
// then measured with gpu::handoffAgreement: per turn, KL(scratch || transfer) and top-1 agreement
// of B from its own prefill against B continuing from A's converted cache, teacher-forced on the
// same transcript. Definitions: docs/transfer.md, "Multi-turn hand-off".
//
// Threading: conversationsOf is a pure function; runHandoff runs on the calling thread (the engine
// thread or a subcommand's main thread), which owns the models.
#pragma once

#include "core/tokenize/tokenizer.h"
#include "core/workload/workload.h"
#include "gpu/model/model.h"
#include "gpu/transfer/transfer.h"

#include <string>
#include <vector>

namespace kvwb::app::jobs {

// One conversation of a workload: its turns' prompts (each the whole conversation so far, ending
// where the assistant answers) and questions (the user's message of that turn; may be empty).
struct Conversation
{
    std::string name; // "tenant/user"
    std::vector<std::string> prompts;
    std::vector<std::string> questions;
};

// The workload's requests grouped by tenant and user, in file order. A group is a conversation
// when every prompt extends the one before it; a group where one does not is skipped with a
// warning naming it and the request (so a generated workload, whose users ask unrelated questions,
// gives none).
std::vector<Conversation> conversationsOf(const std::vector<core::WorkloadRequest> &requests,
                                          std::vector<std::string> &warnings);

struct HandoffSettings
{
    int handoffTurn = 1; // A serves turns 1..K (its answer to K included), B the rest
    int maxTurns = 0;    // at most this many turns of each conversation (0 = all)
    int maxTokens = 32;  // B's scratch answer to the last turn (the transcript has none)
};

struct HandoffTurn
{
    int turn = 0;           // 1-based turn number (> handoffTurn)
    int answerTokens = 0;   // positions compared
    double meanKl = 0;      // KL(scratch || transfer), nats per answer token
    double top1 = 0;        // share of answer positions whose argmaxes agree
    std::vector<double> kl; // [answerTokens]
};

struct HandoffOutcome
{
    int transcriptTokens = 0; // the compared transcript, B's answer to the last turn included
    int handoffTokens = 0;    // converted from A's cache: everything through A's answer to turn K
    std::vector<HandoffTurn> turns;
};

// One conversation handed from A to B after turn settings.handoffTurn. The transcript is the last
// turn's prompt followed by B's greedy scratch answer to it (settings.maxTokens); turn j's answer
// is what turn j + 1's prompt adds before "\nUser: {question}\nAssistant:" (the ShareGPT
// rendering; for another rendering, everything it adds), and the last turn's is B's. Error
// (InvalidArgument) saying why when it cannot be compared: fewer than handoffTurn + 1 turns, A and
// B tokenise it differently, a turn's prompt does not tokenise as a prefix of the transcript, or it
// does not fit both contexts.
HandoffOutcome runHandoff(const gpu::Model &a, const core::Tokenizer &tokA, const gpu::Model &b,
                          const core::Tokenizer &tokB, const gpu::Converter &converter,
                          const Conversation &conversation, const HandoffSettings &settings);

} // namespace kvwb::app::jobs
