#include "core/util/mapped_file.h"

#include "core/util/error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <vector>

namespace kvwb::core {

namespace {

// The live mappings, for releasePages to tell a mapping from heap memory (where MADV_DONTNEED
// would zero the caller's data).
struct Live
{
    std::mutex mutex;
    std::vector<std::pair<const std::byte *, uint64_t>> ranges;
};
Live &live()
{
    static Live l;
    return l;
}

} // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path &path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw Error(ErrorCode::Io, path.string() + ": cannot open: " + std::strerror(errno));
    struct stat st
    {
    };
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(ErrorCode::Io, path.string() + ": not a regular file");
    }
    std::shared_ptr<MappedFile> f(new MappedFile());
    f->m_path = path;
    f->m_size = uint64_t(st.st_size);
    if (f->m_size > 0) {
        void *p = ::mmap(nullptr, size_t(f->m_size), PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw Error(ErrorCode::Io, path.string() + ": cannot map: " + std::strerror(err));
        }
        f->m_data = static_cast<const std::byte *>(p);
        std::lock_guard lock(live().mutex);
        live().ranges.emplace_back(f->m_data, f->m_size);
    }
    ::close(fd);
    return f;
}

MappedFile::~MappedFile()
{
    if (m_data) {
        {
            std::lock_guard lock(live().mutex);
            auto &r = live().ranges;
            r.erase(std::remove(r.begin(), r.end(), std::pair(m_data, m_size)), r.end());
        }
        ::munmap(const_cast<std::byte *>(m_data), size_t(m_size));
    }
}

void MappedFile::releasePages(const void *p, size_t n) noexcept
{
    const auto *b = static_cast<const std::byte *>(p);
    std::lock_guard lock(live().mutex);
    for (const auto &[base, size] : live().ranges)
        if (b >= base && n <= size && size_t(b - base) <= size - n) {
            const long page = ::sysconf(_SC_PAGESIZE);
            if (page <= 0)
                return;
            // whole pages only: a page shared with a neighbouring tensor stays
            const uintptr_t first =
                (reinterpret_cast<uintptr_t>(b) + uintptr_t(page) - 1) / uintptr_t(page) * uintptr_t(page);
            const uintptr_t last = (reinterpret_cast<uintptr_t>(b) + n) / uintptr_t(page) * uintptr_t(page);
            if (last > first)
                ::madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
            return;
        }
}

} // namespace kvwb::core
