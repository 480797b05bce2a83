// libkvwb_spm: libsentencepiece behind a C interface (see spm_shim.h for why).
#include "core/tokenize/spm_shim/spm_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <string>
#include <vector>

struct kvwb_spm
{
    sentencepiece::SentencePieceProcessor processor;
};

namespace {

int fail(kvwb_spm_sink err, void *ctx, const std::string &message)
{
    if (err)
        err(ctx, message.data(), message.size());
    return 1;
}

} // namespace

extern "C" {

#define KVWB_SPM_EXPORT __attribute__((visibility("default")))

KVWB_SPM_EXPORT int kvwb_spm_load(const char *bytes, size_t len, kvwb_spm **out, kvwb_spm_sink err,
                                  void *errCtx)
{
    try {
        auto sp = new kvwb_spm;
        const auto status = sp->processor.LoadFromSerializedProto(std::string_view(bytes, len));
        if (!status.ok()) {
            delete sp;
            return fail(err, errCtx, status.ToString());
        }
        *out = sp;
        return 0;
    } catch (const std::exception &e) {
        return fail(err, errCtx, e.what());
    }
}

KVWB_SPM_EXPORT void kvwb_spm_free(kvwb_spm *sp)
{
    delete sp;
}
KVWB_SPM_EXPORT int kvwb_spm_piece_size(const kvwb_spm *sp)
{
    return sp->processor.GetPieceSize();
}
KVWB_SPM_EXPORT int kvwb_spm_bos_id(const kvwb_spm *sp)
{
    return sp->processor.bos_id();
}
KVWB_SPM_EXPORT int kvwb_spm_eos_id(const kvwb_spm *sp)
{
    return sp->processor.eos_id();
}
KVWB_SPM_EXPORT int kvwb_spm_unk_id(const kvwb_spm *sp)
{
    return sp->processor.unk_id();
}

KVWB_SPM_EXPORT int kvwb_spm_flags(const kvwb_spm *sp, int id)
{
    const auto &p = sp->processor;
    if (id < 0 || id >= p.GetPieceSize())
        return 0;
    return (p.IsControl(id) ? KVWB_SPM_CONTROL : 0) | (p.IsUnknown(id) ? KVWB_SPM_UNKNOWN : 0) |
           (p.IsByte(id) ? KVWB_SPM_BYTE : 0) | (p.IsUnused(id) ? KVWB_SPM_UNUSED : 0);
}

KVWB_SPM_EXPORT int kvwb_spm_encode(const kvwb_spm *sp, const char *text, size_t len, kvwb_spm_sink ids,
                                    void *ctx, kvwb_spm_sink err, void *errCtx)
{
    try {
        std::vector<int> out;
        const auto status = sp->processor.Encode(std::string_view(text, len), &out);
        if (!status.ok())
            return fail(err, errCtx, status.ToString());
        ids(ctx, out.data(), out.size() * sizeof(int));
        return 0;
    } catch (const std::exception &e) {
        return fail(err, errCtx, e.what());
    }
}

KVWB_SPM_EXPORT int kvwb_spm_encode_spans(const kvwb_spm *sp, const char *text, size_t len, kvwb_spm_sink ids,
                                          void *idsCtx, kvwb_spm_sink spans, void *spansCtx,
                                          kvwb_spm_sink err, void *errCtx)
{
    try {
        sentencepiece::ImmutableSentencePieceText spt;
        const auto status = sp->processor.Encode(std::string_view(text, len), spt.mutable_proto());
        if (!status.ok())
            return fail(err, errCtx, status.ToString());
        std::vector<int> outIds, outSpans;
        for (const auto &piece : spt.pieces()) {
            outIds.push_back(int(piece.id()));
            outSpans.push_back(int(piece.begin()));
            outSpans.push_back(int(piece.end()));
        }
        ids(idsCtx, outIds.data(), outIds.size() * sizeof(int));
        spans(spansCtx, outSpans.data(), outSpans.size() * sizeof(int));
        return 0;
    } catch (const std::exception &e) {
        return fail(err, errCtx, e.what());
    }
}

KVWB_SPM_EXPORT int kvwb_spm_decode(const kvwb_spm *sp, const int *ids, size_t n, kvwb_spm_sink text,
                                    void *ctx, kvwb_spm_sink err, void *errCtx)
{
    try {
        std::string out;
        const auto status = sp->processor.Decode(std::vector<int>(ids, ids + n), &out);
        if (!status.ok())
            return fail(err, errCtx, status.ToString());
        text(ctx, out.data(), out.size());
        return 0;
    } catch (const std::exception &e) {
        return fail(err, errCtx, e.what());
    }
}

KVWB_SPM_EXPORT int kvwb_spm_id_to_piece(const kvwb_spm *sp, int id, kvwb_spm_sink piece, void *ctx)
{
    if (id < 0 || id >= sp->processor.GetPieceSize())
        return 1;
    const std::string &p = sp->processor.IdToPiece(id);
    piece(ctx, p.data(), p.size());
    return 0;
}

KVWB_SPM_EXPORT int kvwb_spm_piece_to_id(const kvwb_spm *sp, const char *piece, size_t len)
{
    return sp->processor.PieceToId(std::string_view(piece, len));
}

KVWB_SPM_EXPORT int kvwb_spm_train(const char *args, kvwb_spm_sink err, void *errCtx)
{
    try {
        const auto status = sentencepiece::SentencePieceTrainer::Train(std::string_view(args));
        return status.ok() ? 0 : fail(err, errCtx, status.ToString());
    } catch (const std::exception &e) {
        return fail(err, errCtx, e.what());
    }
}

} // extern "C"
