// `kvwb replay --workers N [--routing POLICY] [--store URL]`: one workload over a fleet of replay
// worker processes. The requests are routed up front (core/workload/routing.h), each worker is this
// executable running `kvwb replay` on its share (with its own models and, given --store, its own
// connection to the shared store), and the workers' ledgers are merged into one, each row with its
// worker and routing decision. The JSON is a single replay's, counted over all workers, plus
// "fleet" (per worker: requests, hits, TTFT, wall time) and the store counters summed.
#pragma once

#include "core/settings/replay_settings.h"

#include <QCommandLineParser>
#include <QStringList>

namespace kvwb::app {

// args: the replay's own arguments (without "replay"); p: them parsed. Returns the exit code.
// settings: what the flags give (the store, the workload and its limit, prices).
int runFleetReplay(const QStringList &args, const QCommandLineParser &p,
                   const core::ReplaySettings &settings);

} // namespace kvwb::app

namespace kvwb::app {

// `kvwb bench-store --store URL --model PATH [--lengths 16,64,256] [--repeats 5]`: what going over
// the network costs against recomputing, per prompt length: prefill time, then a KV cache's way
// through the store (copy to the host, serialise into an envelope, send, fetch, check and
// deserialise, place into a fresh cache), its bytes and the ratio. Medians over --repeats.
int cmdBenchStore(const QStringList &args);

} // namespace kvwb::app

namespace kvwb::app {

// `kvwb summarise --workload FULL.jsonl --model PATH --keep N --out OUT.jsonl [--max-tokens 32]`:
// the summary history policy with a summary the model writes. Reads a full-history conversation
// workload (kvwb workload multiturn / sharegpt --history-policy full), recovers each round's text
// from consecutive prompts, and writes the same requests with the rounds older than the last N
// replaced by the model's greedy summary of them (written once per conversation and length, as a
// chat front end would keep it). Prints the summaries' token and time cost.
int cmdSummarise(const QStringList &args);

} // namespace kvwb::app
