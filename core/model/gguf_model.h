// A GGUF file as a model: its configuration from the `<arch>.*` metadata, its tensors under
// Hugging Face names, and the reverse (a Checkpoint written as GGUF, optionally quantised).
//
// Architectures: llama (also Mistral-style files), qwen2, qwen3, phi3, gemma2, gemma3 (text; Gemma
// norms are stored as 1 + w and read back as w). llama.cpp's converter
// permutes a llama-architecture file's q/k rows for its interleaved RoPE; they are permuted back to
// HF's rotate-half order here (the row permutation works on quantised rows too), so a GGUF and the
// HF directory it came from capture the same KV. Quantised tensors keep their block type in
// TensorInfo::dtype; the engine dequantises them as it loads (core/model/quant.h).
//
// Thread-safety: pure functions over immutable files.
#pragma once

#include "core/model/checkpoint.h"
#include "core/model/gguf.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kvwb::core {

struct GgufModel
{
    ModelConfig config;
    std::string architecture; // general.architecture
    struct Tensor
    {
        TensorInfo info; // HF name and shape
        const std::byte *data = nullptr;
    };
    std::map<std::string, Tensor, std::less<>> tensors;               // by HF name
    std::vector<std::shared_ptr<const std::vector<std::byte>>> owned; // permuted q/k rows
};

// Error(Unsupported) naming the file and the architecture, tensor or metadata kvwb does not read;
// Error(Format) / Error(Config) naming the key or tensor at fault.
GgufModel ggufModel(const GgufFile &file);
std::vector<std::string> ggufArchitectures();

// What `kvwb info` shows about a GGUF: version, architecture, tensors per type with their bytes,
// and the weights' size once dequantised to f32 and to bf16.
struct GgufSummary
{
    uint32_t version = 0;
    std::string architecture;
    std::string name; // general.name, if any
    struct TypeCount
    {
        std::string type;
        int tensors = 0;
        uint64_t bytes = 0;
    };
    std::vector<TypeCount> types;
    uint64_t elements = 0;
};
GgufSummary ggufSummary(const GgufFile &file);

// Write `from` as a GGUF v3 file: matrices in `weightType` (F32, F16, BF16 or a quantised type;
// a matrix whose rows are not whole blocks stays F32, and so do norms and biases, as llama.cpp
// keeps them). `writer` may already hold metadata (the tokenizer: core/tokenize/gguf_tokenizer.h).
// Returns one line per tensor kept in another type than asked.
std::vector<std::string> writeGguf(const Checkpoint &from, const std::filesystem::path &out, DType weightType,
                                   GgufWriter writer = {});

} // namespace kvwb::core
