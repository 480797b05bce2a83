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

} // namespace kvwb::core
