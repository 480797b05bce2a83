// What every job reads before it runs, shared by the subcommands and the engine thread: prompt
// files (text lines, corpus or workload JSONL; core/workload/text_corpus.h) as prompts, and the
// tokenizer beside a loaded model's checkpoint, checked against the model.
//
// Stateless functions; call them on the thread that owns the model.
#pragma once

#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

struct PromptText
{
    std::string text;
    std::string label;  // intent / synset; the first document's when joined
    std::string answer; // the file's expected answer to the prompt ("answer"), "" when none or joined
};
struct PromptFileOptions
{
    std::string split = "all"; // train | validation | all
    bool wholeText = false;
    int join = 1;
};
// The prompts of a file as the options say; malformed lines are skipped into `warnings`.
// Error(Format) naming the file when no prompt of the split is left.
std::vector<PromptText> readPromptFile(const std::string &path, const PromptFileOptions &options,
                                       std::vector<std::string> &warnings);
// The tokenizer beside a loaded model's checkpoint, checked against the model: its path, and the
// tokenizer. Error(Tokenizer) naming the model when there is none or it does not fit.
std::filesystem::path modelTokenizerPath(const gpu::Model &model);
std::unique_ptr<core::Tokenizer> loadModelTokenizer(const gpu::Model &model);

// Bytes one request of `tokens` positions holds on this loaded model
// (core::requestWorkingSetBytes at its compute and KV dtypes and prefill chunk).
int64_t requestWorkingSetBytes(const gpu::Model &model, int64_t tokens);

} // namespace kvwb::app::jobs
