// The one table of kvwb subcommands (app/cli/cli.h). Each executable compiles this file itself:
// kvwb-engine with every run function, the light `kvwb` front end with KVWB_FRONT_END, where an
// engine subcommand's run function is null (the front end execs kvwb-engine for it), so the front
// end links no engine code yet lists every subcommand in --help.
#include "app/cli/cli.h"
#include "app/cli/cli_archive.h"
#include "app/cli/cli_convert.h"
#include "app/cli/cli_info.h"
#include "app/cli/cli_make_model.h"
#include "app/cli/cli_tiers.h"
#include "app/cli/cli_tokenize.h"
#include "app/cli/cli_upgrade.h"
#include "app/cli/cli_wordnet.h"
#ifndef KVWB_FRONT_END
#include "app/cli/cli_align.h"
#include "app/cli/cli_bench_transfer.h"
#include "app/cli/cli_capture.h"
#include "app/cli/cli_compare.h"
#include "app/cli/cli_fleet.h"
#include "app/cli/cli_generate.h"
#include "app/cli/cli_knowledge.h"
#include "app/cli/cli_prices.h"
#include "app/cli/cli_replay.h"
#include "app/cli/cli_semantic.h"
#include "app/cli/cli_sweep.h"
#include "app/cli/cli_train.h"
#ifndef KVWB_HEADLESS
#include "app/cli/cli_report.h"
#endif
#endif

#ifdef KVWB_FRONT_END
#define KVWB_ENGINE_RUN(fn) nullptr
#else
#define KVWB_ENGINE_RUN(fn) fn
#endif

namespace kvwb::app {

const std::vector<Subcommand> &subcommands()
{
    constexpr Runs F = Runs::FrontEnd, E = Runs::Engine;
    static const std::vector<Subcommand> all = {
        {"info",
         "Print a model card (JSON) for an HF directory, GGUF file or llama2.c checkpoint, or an experiment "
         "file.",
         F, cmdInfo},
        {"upgrade", "Rewrite an experiment file of an older kvwb (schema kvwb/1) as kvwb/2.", F, cmdUpgrade},
        {"tokenize", "Encode text with a tokenizer and print the ids.", F, cmdTokenize},
        {"generate", "Generate from a prompt (greedy or sampled), with TTFT and tok/s.", E,
         KVWB_ENGINE_RUN(cmdGenerate)},
        {"bench", "Prefill/decode throughput at several prompt lengths.", E, KVWB_ENGINE_RUN(cmdBench)},
        {"make-model", "Write a random-weight model for smoke tests and benchmarks.", F, cmdMakeModel},
        {"convert", "Convert a checkpoint to a Hugging Face directory or a GGUF file.", F, cmdConvert},
        {"train", "Train a Llama-architecture model on a corpus (AdamW, cosine, resumable).", E,
         KVWB_ENGINE_RUN(cmdTrain)},
        {"train-embedder",
         "Train a sentence embedder on WordNet paraphrases or labelled pairs (contrastive, hard negatives) "
         "and "
         "score it on held-out pairs.",
         E, KVWB_ENGINE_RUN(cmdTrainEmbedder)},
        {"train-verifier",
         "Train a cross-encoder verifier for semantic hits on labelled pairs and score it on held-out pairs.",
         E, KVWB_ENGINE_RUN(cmdTrainVerifier)},
        {"eval-qa", "Score a model's greedy answers to corpus questions (exact match, word F1).", E,
         KVWB_ENGINE_RUN(cmdEvalQa)},
        {"capture", "Capture both models' KV caches for a prompt set into an HDF5 experiment file.", E,
         KVWB_ENGINE_RUN(cmdCapture)},
        {"bench-capture", "Capture cost: bare prefill vs KV writes, with and without compression.", E,
         KVWB_ENGINE_RUN(cmdBenchCapture)},
        {"bench-tiers", "Cache tier latency (exact, semantic, prefix tree) and HNSW recall.", F,
         cmdBenchTiers},
        {"align", "Fit layer-wise KV converters from A to B on an experiment file and store them.", E,
         KVWB_ENGINE_RUN(cmdAlign)},
        {"sweep", "Converter quality over k x lambda x calibration tokens, stored as a table.", E,
         KVWB_ENGINE_RUN(cmdSweep)},
        {"compare", "B from scratch vs B from A's converted cache vs A: KL, top-1, ROUGE-L, TTFT, gate.", E,
         KVWB_ENGINE_RUN(cmdCompare)},
        {"bench-transfer", "Conversion vs prefill time at several prompt lengths.", E,
         KVWB_ENGINE_RUN(cmdBenchTransfer)},
        {"replay", "Replay a workload through exact, semantic, prefix and cross-model cache tiers.", E,
         KVWB_ENGINE_RUN(cmdReplay)},
        {"sweep-semantic",
         "Semantic tier precision, recall and false hits against its threshold on labelled requests.", E,
         KVWB_ENGINE_RUN(cmdSweepSemantic)},
        {"bench-store", "A KV cache's trip through a shared store (Redis) against recomputing it.", E,
         KVWB_ENGINE_RUN(cmdBenchStore)},
        {"summarise",
         "Rewrite a full-history conversation workload with model-written summaries of older rounds.", E,
         KVWB_ENGINE_RUN(cmdSummarise)},
        {"prices", "List the price presets, or cost a replay ledger under several of them.", E,
         KVWB_ENGINE_RUN(cmdPrices)},
#ifndef KVWB_HEADLESS
        {"report", "Write an experiment's report: HTML (charts embedded), PDF, Markdown, CSV/JSON.", E,
         KVWB_ENGINE_RUN(cmdReport)},
#endif
        {"knowledge",
         "Build or show a knowledge graph file: concepts with their knowledge as KV modules of model B.", E,
         KVWB_ENGINE_RUN(cmdKnowledge)},
        {"corpus", "Write a Q/A training corpus (JSONL) from WordNet concepts.", F, cmdCorpus},
        {"archive", "Export a project's whole run as one zip file, or import or show one.", F, cmdArchive},
        {"workload", "Write a request workload (JSONL) for cache replay: WordNet, ShareGPT or Quora pairs.",
         F, cmdWorkload},
    };
    return all;
}

} // namespace kvwb::app
