// Access to libsentencepiece through the libkvwb_spm shim (core/tokenize/spm_shim/spm_shim.h says why it is
// loaded with dlopen instead of linked). Loaded on first use; later calls reuse it.
//
// Thread-safety: spmApi() is safe to call from any thread (static initialisation).
#pragma once

#include "core/tokenize/spm_shim/spm_shim.h"

#include <string>

namespace kvwb::core {

struct SpmApi
{
    decltype(&kvwb_spm_load) load = nullptr;
    decltype(&kvwb_spm_free) free = nullptr;
    decltype(&kvwb_spm_piece_size) pieceSize = nullptr;
    decltype(&kvwb_spm_bos_id) bosId = nullptr;
    decltype(&kvwb_spm_eos_id) eosId = nullptr;
    decltype(&kvwb_spm_unk_id) unkId = nullptr;
    decltype(&kvwb_spm_flags) flags = nullptr;
    decltype(&kvwb_spm_encode) encode = nullptr;
    decltype(&kvwb_spm_encode_spans) encodeSpans = nullptr;
    decltype(&kvwb_spm_decode) decode = nullptr;
    decltype(&kvwb_spm_id_to_piece) idToPiece = nullptr;
    decltype(&kvwb_spm_piece_to_id) pieceToId = nullptr;
    decltype(&kvwb_spm_train) train = nullptr;
};

// Error(Unsupported) naming every path tried when the shim cannot be loaded. Search order:
// $KVWB_SPM_LIBRARY, the build tree's copy, next to the executable, ../lib/kvwb/ from it.
const SpmApi &spmApi();

// SentencePieceTrainer::Train(flags); Error(Tokenizer) with sentencepiece's reason on failure.
void trainSentencePiece(const std::string &flags);

} // namespace kvwb::core
