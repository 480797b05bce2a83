#include "core/sentencepiece_tokenizer.h"

#include "core/error.h"
#include "core/text_util.h"

#include <sentencepiece_processor.h>

namespace kvwb::core {

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp,
                                               std::string source)
    : m_sp(std::move(sp)), m_source(std::move(source))
{}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::fromFile(const std::filesystem::path &path)
{
    // Read it ourselves so that a missing file is Error(Io) like everywhere else, and a bad one is
    // Error(Tokenizer) carrying sentencepiece's reason.
    const std::string bytes = text::readWholeFile(path);
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp->LoadFromSerializedProto(bytes);
    if (!status.ok())
        throw Error(ErrorCode::Tokenizer,
                    path.string() + ": not a SentencePiece model: " + status.ToString());
    if (sp->GetPieceSize() <= 0)
        throw Error(ErrorCode::Tokenizer, path.string() + ": SentencePiece model has no pieces");
    return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(sp), path.string()));
}

std::vector<int> SentencePieceTokenizer::encode(std::string_view text, bool addSpecial) const
{
    std::vector<int> ids;
    if (addSpecial && m_sp->bos_id() >= 0)
        ids.push_back(m_sp->bos_id());
    std::vector<int> body;
    const auto status = m_sp->Encode(text, &body);
    if (!status.ok())
        throw Error(ErrorCode::Tokenizer, m_source + ": encode failed: " + status.ToString());
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

std::string SentencePieceTokenizer::decode(const std::vector<int> &ids, bool skipSpecial) const
{
    // Runs of ordinary ids go through the processor (it handles "▁", byte pieces and the dummy
    // prefix); control ids in between are written as their text unless skipSpecial.
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
        if (run.empty())
            return;
        std::string s;
        const auto status = m_sp->Decode(run, &s);
        if (!status.ok())
            throw Error(ErrorCode::Tokenizer, m_source + ": decode failed: " + status.ToString());
        out += s;
        run.clear();
    };
    const int n = m_sp->GetPieceSize();
    for (int id : ids) {
        if (id < 0 || id >= n)
            continue; // out of range: skipped, as HF does
        if (m_sp->IsControl(id)) {
            flush();
            if (!skipSpecial)
                out += m_sp->IdToPiece(id);
            continue;
        }
        if (skipSpecial && m_sp->IsUnknown(id))
            continue;
        run.push_back(id);
    }
    flush();
    return out;
}

std::string SentencePieceTokenizer::piece(int id) const
{
    if (id < 0 || id >= m_sp->GetPieceSize())
        return {};
    return m_sp->IdToPiece(id);
}

int SentencePieceTokenizer::vocabSize() const
{
    return m_sp->GetPieceSize();
}

std::optional<int> SentencePieceTokenizer::bosId() const
{
    return m_sp->bos_id() >= 0 ? std::optional<int>(m_sp->bos_id()) : std::nullopt;
}

std::optional<int> SentencePieceTokenizer::eosId() const
{
    return m_sp->eos_id() >= 0 ? std::optional<int>(m_sp->eos_id()) : std::nullopt;
}

bool SentencePieceTokenizer::isSpecial(int id) const
{
    return id >= 0 && id < m_sp->GetPieceSize() && (m_sp->IsControl(id) || m_sp->IsUnknown(id));
}

std::optional<int> SentencePieceTokenizer::pieceToId(std::string_view p) const
{
    // PieceToId answers unk_id for unknown pieces; only trust it when the piece round-trips.
    const int id = m_sp->PieceToId(p);
    if (id < 0 || id >= m_sp->GetPieceSize() || m_sp->IdToPiece(id) != p)
        return std::nullopt;
    return id;
}

} // namespace kvwb::core
