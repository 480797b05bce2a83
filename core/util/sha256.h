// SHA-256 fingerprints of files and byte strings (OpenSSL's libcrypto). Thread-safe, stateless.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace kvwb::core {

std::string sha256Hex(std::span<const std::byte> data);
std::string sha256Hex(std::string_view text);
// Streams the files in order through one digest. Error(Io) names an unreadable file.
std::string sha256Files(const std::vector<std::filesystem::path> &files);

// A digest fed in pieces (a file streamed through an archive): add() any number of times, then
// hex() once.
class Sha256Stream
{
public:
    Sha256Stream();
    ~Sha256Stream();
    Sha256Stream(const Sha256Stream &) = delete;
    Sha256Stream &operator=(const Sha256Stream &) = delete;
    void add(const void *data, size_t bytes);
    std::string hex();

private:
    void *m_ctx; // EVP_MD_CTX
};

} // namespace kvwb::core
