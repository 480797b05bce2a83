// The semantic tier's second stage: before a candidate above the threshold is served, a verifier
// (a cross-encoder reading both questions together: gpu/model/cross_encoder.h) scores whether the
// cached question and the request's ask the same; the candidate serves only at a score >= the
// verifier's threshold. It fails closed: a score that is not a number, or a verifier that throws,
// rejects the candidate (the request is computed like a miss). A guard (semantic_guards.h) that
// holds a candidate back may be overruled by the verifier when asked (`overrulesGuards`): the
// candidate then serves only on the verifier's pass.
//
// Thread-safety: a verifier is used by one replay thread at a time; verify() is a pure function
// around it.
#pragma once

#include "core/util/enum_names.h"

#include <string>

namespace kvwb::core {

class PairVerifier
{
public:
    virtual ~PairVerifier() = default;
    // The probability that the two texts ask the same (any real; only a number >= the threshold passes).
    virtual double score(const std::string &cached, const std::string &request) = 0;
    virtual std::string name() const = 0;
};

enum class VerifierVerdict
{
    None,   // not consulted
    Pass,   // served
    Reject, // the score was under the threshold
    Error   // the verifier failed or gave no number: rejected (fails closed)
};
inline constexpr EnumName<VerifierVerdict> kVerifierVerdictNames[] = {{VerifierVerdict::None, ""},
                                                                      {VerifierVerdict::Pass, "pass"},
                                                                      {VerifierVerdict::Reject, "reject"},
                                                                      {VerifierVerdict::Error, "error"}};
KVWB_ENUM_NAMES(VerifierVerdict, kVerifierVerdictNames, verifierVerdictName, parseVerifierVerdict)

struct VerifierSettings
{
    PairVerifier *verifier = nullptr; // none: every candidate above the threshold serves (guards aside)
    double threshold = 0.5;
    bool overrulesGuards = false;
};

struct VerifierCheck
{
    VerifierVerdict verdict = VerifierVerdict::None;
    double score = -1; // -1 when the verifier gave none
    double ms = 0;
    std::string error; // what the verifier threw
};

// Scores the pair and judges it (NaN and exceptions reject). verdict None when no verifier is set.
VerifierCheck verify(const VerifierSettings &settings, const std::string &cached, const std::string &request);

} // namespace kvwb::core
