#include "core/cache/semantic_verifier.h"

#include "core/util/clock.h"

#include <cmath>
#include <exception>

namespace kvwb::core {

VerifierCheck verify(const VerifierSettings &settings, const std::string &cached, const std::string &request)
{
    VerifierCheck out;
    if (!settings.verifier)
        return out;
    const auto start = Clock::now();
    try {
        const double s = settings.verifier->score(cached, request);
        if (std::isnan(s)) {
            out.verdict = VerifierVerdict::Error;
            out.error = "the verifier's score is not a number";
        } else {
            out.score = s;
            out.verdict = s >= settings.threshold ? VerifierVerdict::Pass : VerifierVerdict::Reject;
        }
    } catch (const std::exception &e) {
        out.verdict = VerifierVerdict::Error;
        out.error = e.what();
    }
    out.ms = msSince(start);
    return out;
}

} // namespace kvwb::core
