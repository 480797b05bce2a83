// The settings of a converter fit (`kvwb align`, the window's Alignment step), as one plain type,
// and its one table (core/settings/setting_table.h): the command line's options, and the window's
// request is this same type. The fit itself is app/jobs/fit_job.h's.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/settings/setting_table.h"
#include "core/store/converter_family.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvwb::core {

struct FitSettings
{
    std::string experiment; // the experiment file from `kvwb capture`
    LayerSelection selection = LayerSelection::Proportional;
    int k = 1;               // source layers per target layer (topk: 8 unless given), capped at A's layers
    bool autoLambda = false; // choose lambda per layer on the validation prompts
    double lambda = 0.01;    // relative to the mean feature variance
    bool perHead = false;    // each B head from the same head of A only
    ConverterFamily family = ConverterFamily::Auto; // auto: ridge, then the MLP; the lower validation KL
    double budgetSeconds = 0; // auto, mlp: MLP training stops here (0: no limit); untrained layers stay ridge
    int autoPrompts = 32;     // auto, kl: validation prompts on which B's KL chooses the family / epoch
    int rank = 16;            // low-rank: the rank of each map
    int mlpHidden = 256;      // mlp: the branch's width
    int mlpEpochs = 30;       // mlp: at most this many epochs
    int mlpBatch = 256;       // mlp: rows per step
    double learningRate = 1e-3; // mlp: Adam's
    int patience = 3;           // mlp, kl: epochs without a validation gain before training stops
    // kl: after the fit above, its maps trained through frozen model B on B's next-token KL
    FitObjective objective = FitObjective::Kv;
    int klEpochs = 12;            // kl: at most this many passes over the training prompts
    double klLearningRate = 3e-5; // kl: Adam's
    TokenFeatures tokenFeatures;  // inputs beside A's rows (full maps; B's layer 0, offsets, window)
    int64_t maxTrainTokens = 0;   // calibration tokens (0: every training prompt)
    std::string name = "default";
    int attentionPrompts = 32; // test prompts scored by attention-output cosine
    bool attention = true;     // score the attention-output cosine (needs model B)
    bool dryRun = false;       // fit and print, do not store
    bool replace = false;      // store over a converter of the same name (else the fit is refused first)
    bool resume = false;       // mlp, auto: continue an interrupted fit from its trained MLP layers
    double validFraction = 0.15, testFraction = 0.15;
    int64_t seed = 1; // the prompt split's (and the MLP's)
};

bool operator==(const FitSettings &x, const FitSettings &y);

using FitFlag = SettingRow<FitSettings>;

// Every fit setting in the order `kvwb align --help` lists them.
const std::vector<FitFlag> &fitFlags();
const FitFlag *findFitFlag(const std::string &name);

} // namespace kvwb::core
