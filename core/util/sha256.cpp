#include "core/util/sha256.h"

#include "core/util/error.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

namespace kvwb::core {

namespace {

struct MdCtxDeleter
{
    void operator()(EVP_MD_CTX *c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx newSha256()
{
    MdCtx ctx(EVP_MD_CTX_new());
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw Error(ErrorCode::Internal, "sha256: cannot initialise OpenSSL digest");
    return ctx;
}

void update(EVP_MD_CTX *ctx, const void *data, size_t n)
{
    if (n > 0 && EVP_DigestUpdate(ctx, data, n) != 1)
        throw Error(ErrorCode::Internal, "sha256: OpenSSL digest update failed");
}

std::string finishHex(EVP_MD_CTX *ctx)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx, md, &len) != 1)
        throw Error(ErrorCode::Internal, "sha256: OpenSSL digest final failed");
    static const char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned int i = 0; i < len; ++i) {
        out.push_back(hex[md[i] >> 4]);
        out.push_back(hex[md[i] & 0xf]);
    }
    return out;
}

} // namespace

std::string sha256Hex(std::span<const std::byte> data)
{
    MdCtx ctx = newSha256();
    update(ctx.get(), data.data(), data.size());
    return finishHex(ctx.get());
}

std::string sha256Hex(std::string_view text)
{
    return sha256Hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::string sha256Files(const std::vector<std::filesystem::path> &files)
{
    MdCtx ctx = newSha256();
    // 1 MiB chunks: large enough to keep syscall overhead negligible, small enough to never matter
    // for memory even with 10 GB shards.
    std::vector<char> buf(size_t(1) << 20);
    for (const auto &path : files) {
        std::ifstream in(path, std::ios::binary);
        if (!in)
            throw Error(ErrorCode::Io, path.string() + ": cannot open for hashing: " + std::strerror(errno));
        while (in) {
            in.read(buf.data(), std::streamsize(buf.size()));
            update(ctx.get(), buf.data(), size_t(in.gcount()));
        }
        if (in.bad())
            throw Error(ErrorCode::Io, path.string() + ": read error while hashing");
    }
    return finishHex(ctx.get());
}

Sha256Stream::Sha256Stream() : m_ctx(newSha256().release()) {}

Sha256Stream::~Sha256Stream()
{
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX *>(m_ctx));
}

void Sha256Stream::add(const void *data, size_t bytes)
{
    update(static_cast<EVP_MD_CTX *>(m_ctx), data, bytes);
}

std::string Sha256Stream::hex()
{
    return finishHex(static_cast<EVP_MD_CTX *>(m_ctx));
}

} // namespace kvwb::core
