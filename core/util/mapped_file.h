// Read-only memory mapping of a whole file (RAII).
//
// Weights are read through mappings so that a 10 GB checkpoint costs no heap until the engine copies
// a tensor to its device. Immutable after open; safe to share between threads via shared_ptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

namespace kvwb::core {

class MappedFile
{
public:
    // Throws Error(Io) naming the path when it is missing, a directory, or unreadable.
    static std::shared_ptr<const MappedFile> open(const std::filesystem::path &path);
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    const std::filesystem::path &path() const { return m_path; }
    const std::byte *data() const { return m_data; }
    uint64_t size() const { return m_size; } // bytes
    std::span<const std::byte> bytes() const { return {m_data, size_t(m_size)}; }

    // Drops the resident pages of [p, p + n) when the range lies inside a live mapping (a weight
    // copied to its device no longer needs its file pages: a model's peak resident memory is then
    // its weights once, not its weights plus the file); later reads fault the pages in again from
    // the file. Does nothing for memory that is not a mapping made here.
    static void releasePages(const void *p, size_t n) noexcept;

private:
    MappedFile() = default;
    std::filesystem::path m_path;
    const std::byte *m_data = nullptr;
    uint64_t m_size = 0; // bytes
};

} // namespace kvwb::core
