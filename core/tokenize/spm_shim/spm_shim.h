/* C interface of libkvwb_spm, the one place libsentencepiece is linked.
 *
 * Why a separate, dlopen'ed library: Debian's libsentencepiece embeds its own protobuf-lite and
 * exports its symbols, while LibTorch loads the system libprotobuf. Linked into one process, the
 * system libprotobuf binds to sentencepiece's copies during its static initialisation and crashes
 * before main(). kvwb loads this shim with RTLD_LOCAL | RTLD_DEEPBIND, so sentencepiece and its
 * protobuf see only each other and LibTorch's protobuf never sees them.
 *
 * Data crosses as plain bytes through sink callbacks (the caller owns every buffer). All functions
 * return 0 on success; on failure they return non-zero and pass a message to err (when given).
 * Thread-safety: a loaded processor is immutable; encode/decode may run concurrently.
 */
#ifndef KVWB_SPM_SHIM_H
#define KVWB_SPM_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvwb_spm kvwb_spm;
/* Receives n bytes (or n / sizeof(int) ids) at data; may be called several times. */
typedef void (*kvwb_spm_sink)(void *ctx, const void *data, size_t n);

enum
{
    KVWB_SPM_CONTROL = 1,
    KVWB_SPM_UNKNOWN = 2,
    KVWB_SPM_BYTE = 4,
    KVWB_SPM_UNUSED = 8
};

int kvwb_spm_load(const char *bytes, size_t len, kvwb_spm **out, kvwb_spm_sink err, void *errCtx);
void kvwb_spm_free(kvwb_spm *sp);
int kvwb_spm_piece_size(const kvwb_spm *sp);
int kvwb_spm_bos_id(const kvwb_spm *sp); /* -1 when absent */
int kvwb_spm_eos_id(const kvwb_spm *sp);
int kvwb_spm_unk_id(const kvwb_spm *sp);
int kvwb_spm_flags(const kvwb_spm *sp, int id); /* KVWB_SPM_* bits */
int kvwb_spm_encode(const kvwb_spm *sp, const char *text, size_t len, kvwb_spm_sink ids, void *ctx,
                    kvwb_spm_sink err, void *errCtx);
/* The same ids, and per id its byte span in text as two ints (begin, end) to spans. */
int kvwb_spm_encode_spans(const kvwb_spm *sp, const char *text, size_t len, kvwb_spm_sink ids, void *idsCtx,
                          kvwb_spm_sink spans, void *spansCtx, kvwb_spm_sink err, void *errCtx);
int kvwb_spm_decode(const kvwb_spm *sp, const int *ids, size_t n, kvwb_spm_sink text, void *ctx,
                    kvwb_spm_sink err, void *errCtx);
int kvwb_spm_id_to_piece(const kvwb_spm *sp, int id, kvwb_spm_sink piece, void *ctx);
int kvwb_spm_piece_to_id(const kvwb_spm *sp, const char *piece, size_t len); /* unk id when unknown */
/* SentencePieceTrainer::Train with a flag string ("--input=... --model_prefix=... ..."). */
int kvwb_spm_train(const char *args, kvwb_spm_sink err, void *errCtx);

#ifdef __cplusplus
}
#endif

#endif
