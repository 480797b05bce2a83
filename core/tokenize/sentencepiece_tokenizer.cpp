#include "core/tokenize/sentencepiece_tokenizer.h"

#include "core/tokenize/spm_library.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace kvwb::core {

namespace {

void appendBytes(void *ctx, const void *data, size_t n)
{
    static_cast<std::string *>(ctx)->append(static_cast<const char *>(data), n);
}

void appendIds(void *ctx, const void *data, size_t n)
{
    auto *out = static_cast<std::vector<int> *>(ctx);
    const int *ids = static_cast<const int *>(data);
    out->insert(out->end(), ids, ids + n / sizeof(int));
}

} // namespace

SentencePieceTokenizer::SentencePieceTokenizer(kvwb_spm *sp, std::string source)
    : m_sp(sp), m_source(std::move(source))
{}

SentencePieceTokenizer::~SentencePieceTokenizer()
{
    if (m_sp)
        spmApi().free(m_sp);
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::fromFile(const std::filesystem::path &path)
{
    // Read it ourselves so that a missing file is Error(Io) like everywhere else, and a bad one is
    // Error(Tokenizer) carrying sentencepiece's reason.
    return fromBytes(text::readWholeFile(path), path.string());
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::fromBytes(std::string_view bytes,
                                                                          const std::string &sourceName)
{
    const SpmApi &api = spmApi();
    kvwb_spm *sp = nullptr;
    std::string err;
    if (api.load(bytes.data(), bytes.size(), &sp, appendBytes, &err) != 0)
        throw Error(ErrorCode::Tokenizer, sourceName + ": not a SentencePiece model: " + err);
    std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer(sp, sourceName));
    if (api.pieceSize(sp) <= 0)
        throw Error(ErrorCode::Tokenizer, sourceName + ": SentencePiece model has no pieces");
    return tok;
}

std::vector<int> SentencePieceTokenizer::encode(std::string_view text, bool addSpecial) const
{
    checkTextSize(text, m_source);
    const SpmApi &api = spmApi();
    std::vector<int> ids;
    if (addSpecial && api.bosId(m_sp) >= 0)
        ids.push_back(api.bosId(m_sp));
    std::string err;
    if (api.encode(m_sp, text.data(), text.size(), appendIds, &ids, appendBytes, &err) != 0)
        throw Error(ErrorCode::Tokenizer, m_source + ": encode failed: " + err);
    return ids;
}

Encoding SentencePieceTokenizer::encodeWithOffsets(std::string_view text, bool addSpecial) const
{
    checkTextSize(text, m_source);
    const SpmApi &api = spmApi();
    Encoding e;
    if (addSpecial && api.bosId(m_sp) >= 0) {
        e.ids.push_back(api.bosId(m_sp));
        e.spans.push_back({0, 0});
    }
    std::vector<int> ids, spans; // spans: (begin, end) per id
    std::string err;
    if (api.encodeSpans(m_sp, text.data(), text.size(), appendIds, &ids, appendIds, &spans, appendBytes,
                        &err) != 0)
        throw Error(ErrorCode::Tokenizer, m_source + ": encode failed: " + err);
    if (spans.size() != 2 * ids.size())
        throw Error(ErrorCode::Internal, m_source + ": sentencepiece gave " +
                                             std::to_string(spans.size() / 2) + " spans for " +
                                             std::to_string(ids.size()) + " ids");
    const size_t first = e.ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
        e.ids.push_back(ids[i]);
        // sentencepiece's offsets are into the original text, through its normaliser
        const int32_t b = std::clamp<int32_t>(spans[2 * i], 0, int32_t(text.size())),
                      en = std::clamp<int32_t>(spans[2 * i + 1], b, int32_t(text.size()));
        e.spans.push_back({b, en});
    }
    // A character sentencepiece spells as byte pieces is reported as one span for the run (on its
    // first or spread oddly over the pieces): give each byte piece its own byte when the run's
    // bytes are exactly that many.
    for (size_t i = first; i < e.ids.size();) {
        if (!(api.flags(m_sp, e.ids[i]) & KVWB_SPM_BYTE)) {
            ++i;
            continue;
        }
        size_t j = i;
        int32_t lo = INT32_MAX, hi = -1;
        while (j < e.ids.size() && (api.flags(m_sp, e.ids[j]) & KVWB_SPM_BYTE)) {
            if (!e.spans[j].empty()) {
                lo = std::min(lo, e.spans[j].begin);
                hi = std::max(hi, e.spans[j].end);
            }
            ++j;
        }
        if (hi >= lo && size_t(hi - lo) == j - i)
            for (size_t k = i; k < j; ++k)
                e.spans[k] = {lo + int32_t(k - i), lo + int32_t(k - i) + 1};
        i = j;
    }
    return e;
}

std::string SentencePieceTokenizer::decode(const std::vector<int> &ids, bool skipSpecial) const
{
    // Runs of ordinary ids go through the processor (it handles "▁", byte pieces and the dummy
    // prefix); control ids in between are written as their text unless skipSpecial.
    const SpmApi &api = spmApi();
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
        if (run.empty())
            return;
        std::string err;
        if (api.decode(m_sp, run.data(), run.size(), appendBytes, &out, appendBytes, &err) != 0)
            throw Error(ErrorCode::Tokenizer, m_source + ": decode failed: " + err);
        run.clear();
    };
    const int n = api.pieceSize(m_sp);
    for (int id : ids) {
        if (id < 0 || id >= n)
            continue; // out of range: skipped, as HF does
        const int flags = api.flags(m_sp, id);
        if (flags & KVWB_SPM_CONTROL) {
            flush();
            if (!skipSpecial)
                out += piece(id);
            continue;
        }
        if (skipSpecial && (flags & KVWB_SPM_UNKNOWN))
            continue;
        run.push_back(id);
    }
    flush();
    return out;
}

std::string SentencePieceTokenizer::piece(int id) const
{
    std::string p;
    spmApi().idToPiece(m_sp, id, appendBytes, &p);
    return p;
}

int SentencePieceTokenizer::vocabSize() const
{
    return spmApi().pieceSize(m_sp);
}

std::optional<int> SentencePieceTokenizer::bosId() const
{
    const int id = spmApi().bosId(m_sp);
    return id >= 0 ? std::optional<int>(id) : std::nullopt;
}

std::optional<int> SentencePieceTokenizer::eosId() const
{
    const int id = spmApi().eosId(m_sp);
    return id >= 0 ? std::optional<int>(id) : std::nullopt;
}

bool SentencePieceTokenizer::isSpecial(int id) const
{
    return (spmApi().flags(m_sp, id) & (KVWB_SPM_CONTROL | KVWB_SPM_UNKNOWN)) != 0;
}

std::optional<int> SentencePieceTokenizer::pieceToId(std::string_view p) const
{
    // PieceToId answers unk_id for unknown pieces; only trust it when the piece round-trips.
    const int id = spmApi().pieceToId(m_sp, p.data(), p.size());
    if (id < 0 || id >= vocabSize() || piece(id) != p)
        return std::nullopt;
    return id;
}

} // namespace kvwb::core
