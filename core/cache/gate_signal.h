// Which signal the cross-model quality gate measures before converted KV is used, with its default
// threshold and direction. One spelling for flags, JSON, projects, ledgers and reports.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"

namespace kvwb::core {

enum class GateSignal
{
    KvCos,  // cosine of converted vs B's own KV on the prompt's tail (higher is better)
    TailKl, // KL of B's next-token distribution from the converted cache vs B's own (lower is better)
    Nll,    // B's negative log-likelihood of the prompt's tail under the converted cache (lower is better)
    AttnCos // cosine of B's attention output on the tail over converted vs own KV (higher is better)
};
// Every signal, in the order flags, menus and the per-signal gate curves list them.
inline constexpr GateSignal kGateSignals[] = {GateSignal::TailKl, GateSignal::KvCos, GateSignal::AttnCos,
                                              GateSignal::Nll};
inline constexpr EnumName<GateSignal> kGateSignalNames[] = {{GateSignal::KvCos, "kv_cos"},
                                                            {GateSignal::TailKl, "tail_kl"},
                                                            {GateSignal::Nll, "nll"},
                                                            {GateSignal::AttnCos, "attn_cos"}};
KVWB_ENUM_NAMES(GateSignal, kGateSignalNames, gateSignalName, parseGateSignal)
// kv_cos 0.9, tail_kl 0.1, nll 3.0, attn_cos 0.9
inline double defaultGateThreshold(GateSignal s) noexcept
{
    switch (s) {
    case GateSignal::KvCos:
    case GateSignal::AttnCos:
        return 0.9;
    case GateSignal::TailKl:
        return 0.1;
    case GateSignal::Nll:
        return 3.0;
    }
    return 0.1;
}
// Whether the gate passes at signal >= threshold (the cosines) rather than <= threshold (KL, NLL).
inline bool gateHigherIsBetter(GateSignal s) noexcept
{
    return s == GateSignal::KvCos || s == GateSignal::AttnCos;
}

} // namespace kvwb::core
