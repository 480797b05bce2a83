// Access to libsentencepiece through the libkvwb_spm shim (core/tokenize/spm_shim/spm_shim.h says why it is
// loaded with dlopen instead of linked). Loaded on first use; later calls reuse it.
//
// Thread-safety: spmApi() is safe to call from any thread (static initialisation).
#pragma once

#include "core/tokenize/spm_shim/spm_shim.h"

#include <string>

namespace kvwb::core {

// Every function of the shim, once: X(member of SpmApi, exported symbol). SpmApi's fields and the
// loader's dlsym() calls are both generated from it.
#define KVWB_SPM_API_FUNCTIONS(X)                                                                            \
    X(load, kvwb_spm_load)                                                                                   \
    X(free, kvwb_spm_free)                                                                                   \
    X(pieceSize, kvwb_spm_piece_size)                                                                        \
    X(bosId, kvwb_spm_bos_id)                                                                                \
    X(eosId, kvwb_spm_eos_id)                                                                                \
    X(unkId, kvwb_spm_unk_id)                                                                                \
    X(flags, kvwb_spm_flags)                                                                                 \
    X(encode, kvwb_spm_encode)                                                                               \
    X(encodeSpans, kvwb_spm_encode_spans)                                                                    \
    X(decode, kvwb_spm_decode)                                                                               \
    X(idToPiece, kvwb_spm_id_to_piece)                                                                       \
    X(pieceToId, kvwb_spm_piece_to_id)                                                                       \
    X(train, kvwb_spm_train)

struct SpmApi
{
#define KVWB_SPM_API_FIELD(member, symbol) decltype(&symbol) member = nullptr;
    KVWB_SPM_API_FUNCTIONS(KVWB_SPM_API_FIELD)
#undef KVWB_SPM_API_FIELD
};

// Error(Unsupported) naming every path tried when the shim cannot be loaded. Search order:
// $KVWB_SPM_LIBRARY, the build tree's copy, next to the executable, ../lib/kvwb/ from it.
const SpmApi &spmApi();

// SentencePieceTrainer::Train(flags); Error(Tokenizer) with sentencepiece's reason on failure.
void trainSentencePiece(const std::string &flags);

} // namespace kvwb::core
