// Reading a corpus or prompt file: the JSONL that `kvwb corpus` writes (fields text, split, and
// optionally prompt, answer, synset, rank), the workload JSONL of `kvwb workload` (prompt, intent),
// or plain text with one document a line.
//
// Partial success is a result: malformed lines are skipped and reported as "FILE:LINE: reason".
// Thread-safety: pure function.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::core {

struct TextDocument
{
    std::string text; // what a model trains on
    bool validation = false;
    std::string prompt; // evaluation prompt ("Q: ...\nA:"), empty for plain text
    std::string answer; // expected continuation, empty for plain text
    std::string synset; // intent label, if any
    int rank = -1;      // concept popularity rank, 0 = most popular; -1 unknown
};

struct TextCorpus
{
    std::vector<TextDocument> documents;
    std::vector<std::string> warnings; // first 20 malformed lines, "FILE:LINE: reason"
    size_t skipped = 0;                // all malformed lines
};

// *.jsonl: one JSON object a line; `text` (or, without it, `prompt`) required, `split` "train"
// (default) or "validation"/"val".
// Anything else: each non-empty line is a document; every 20th line is validation.
// Error(Io) when unreadable; Error(Format) when no document could be read.
TextCorpus readTextCorpus(const std::filesystem::path &path);

} // namespace kvwb::core
