#include "core/settings/embedder_train_settings.h"

#include "core/settings/setting_rows_p.h"

namespace kvwb::core {

namespace {

using S = EmbedderTrainSettings;
using namespace settings_detail;

std::vector<EmbedderTrainFlag> makeFlags()
{
    return {
        text<S>("out", "DIR", "Output sentence-transformers directory (written atomically).", &S::out,
                Scope::Run),
        text<S>("wordnet-dir", "DIR", "WordNet database directory (default /usr/share/wordnet).",
                &S::wordnetDir, Scope::Input),
        integer<S, size_t>("concepts", "N", "Most popular noun concepts (default 1000, as the demo).",
                           &S::concepts, 2),
        integer<S, int>("hold-out-every", "N",
                        "Never train on every Nth concept by rank (default 10; 0: none); they and the "
                        "validation-only templates make the held-out pairs.",
                        &S::holdOutEvery, 0),
        integer<S, int>("vocab", "N", "WordPiece vocabulary size (default 4000).", &S::vocabSize, 64),
        integer<S, int>("hidden", "N", "Hidden size (default 128).", &S::hidden, 8, 4096),
        integer<S, int>("layers", "N", "Encoder layers (default 2).", &S::layers, 1, 48),
        integer<S, int>("heads", "N", "Attention heads (default 4).", &S::heads, 1, 64),
        integer<S, int>("intermediate", "N", "Feed-forward size (default 256).", &S::intermediate, 8, 16384),
        integer<S, int>("max-positions", "N", "Positions (default 64).", &S::maxPositions, 8, 4096),
        integer<S, int>("steps", "N", "Optimizer steps (default 1500).", &S::steps, 1),
        integer<S, int>("batch", "N", "Triples per step (default 64).", &S::batch, 2, 4096),
        real("lr", "LR", "Peak learning rate (default 1e-3).", &S::lr, 0, 10),
        integer<S, int>("warmup", "N", "Linear warmup steps (default 100).", &S::warmup, 0),
        real("temperature", "T", "InfoNCE temperature (default 0.05).", &S::temperature, 1e-4, 10),
        integer<S, size_t>("eval-pairs", "N", "Held-out labelled pairs scored at the end (default 4000).",
                           &S::evalPairs, 10),
        integer<S, uint64_t>("seed", "S", "Seed for initialisation and batches (default 1).", &S::seed, 0,
                             uint64_t(INT64_MAX)),
        text<S>(
            "pairs", "FILE",
            "Labelled pairs to learn from (TSV text, text, label; Quora's or GLUE's TSV; JSONL): the user's "
            "own logs or a public paraphrase set. The embedder then learns from them, not from WordNet.",
            &S::pairs, Scope::Input),
        text<S>("init", "DIR",
                "Fine-tune this BERT-family sentence encoder (its vocabulary and sizes) instead of a new one "
                "(with --pairs).",
                &S::init, Scope::Input),
        real(
            "validation", "F",
            "Share of the pairs held out for validation, whole groups of pairs sharing a text (default 0.1).",
            &S::validationShare, 0, 0.9),
        integer<S, int>("eval-every", "N", "Steps between validation passes (default 100; with --pairs).",
                        &S::evalEvery, 1),
        integer<S, int>("patience", "N",
                        "Validation passes without a better AUC before stopping early (default 5; 0: never).",
                        &S::patience, 0),
        real("margin", "M", "Cosine below which a labelled non-duplicate is pushed (default 0.5).",
             &S::margin, -1, 1),
        toggle("resume", "Continue an interrupted --pairs training from OUT.train_state.", &S::resume, true,
               "resume", Scope::Run),
        toggle("force", "Replace an output file that exists, or an output directory kvwb wrote.", &S::force,
               true, "force", Scope::Run)};
}

} // namespace

KVWB_SETTING_TABLE(EmbedderTrainSettings, embedderTrainFlags, findEmbedderTrainFlag, makeFlags)

} // namespace kvwb::core
