#include "core/util/mapped_file.h"

#include "core/util/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvwb::core {

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
    }
    ::close(fd);
    return f;
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<std::byte *>(m_data), size_t(m_size));
}

} // namespace kvwb::core
