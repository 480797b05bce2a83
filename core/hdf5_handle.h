// RAII ownership of HDF5 identifiers (hid_t), and the seam where HDF5 status codes become
// kvwb::core::Error.
//
// Internal to core/: only .cpp files include this header (HDF5 is linked PRIVATE to kvwb_core), so
// no public header exposes hid_t. One Handle owns one identifier and closes it with the matching
// H5*close function when destroyed; handles are move-only, like ggml-cpp.h's unique_ptr deleters.
//
// Thread-safety: none. Debian's HDF5 is built without its thread-safety option, so every HDF5 call
// in the process must come from one thread at a time (in kvwb: the engine thread).
#pragma once

#include "core/error.h"

#include <hdf5.h>

#include <string>
#include <utility>

namespace kvwb::core::h5 {

template <herr_t (*Close)(hid_t)> class Handle
{
public:
    Handle() = default;
    explicit Handle(hid_t id) : m_id(id) {}
    ~Handle() { reset(); }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    Handle(Handle &&other) noexcept : m_id(std::exchange(other.m_id, H5I_INVALID_HID)) {}
    Handle &operator=(Handle &&other) noexcept
    {
        if (this != &other) {
            reset();
            m_id = std::exchange(other.m_id, H5I_INVALID_HID);
        }
        return *this;
    }

    hid_t get() const noexcept { return m_id; }
    bool valid() const noexcept { return m_id >= 0; }
    explicit operator bool() const noexcept { return valid(); }

    // Closes now; returns the close status (negative on failure) so callers that must know
    // (H5Fclose flushes) can report it. Destructors ignore it.
    herr_t reset() noexcept
    {
        herr_t status = 0;
        if (m_id >= 0)
            status = Close(m_id);
        m_id = H5I_INVALID_HID;
        return status;
    }

private:
    hid_t m_id = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;
using Attribute = Handle<H5Aclose>;
using PropList = Handle<H5Pclose>;

// Call before the first HDF5 call of every public operation (idempotent):
// - turns off HDF5's automatic printing of its error stack to stderr (we report errors ourselves);
// - on the first call in the process, asks HDF5 not to run its atexit clean-up. When a file's
//   close fails (a full disk), HDF5 1.10.8 leaves a dangling file id that its atexit handler then
//   dereferences (SIGSEGV at exit). Our writers close their files explicitly and every committed
//   prompt is flushed already, so the atexit clean-up has nothing to save.
void prepareLibrary() noexcept;

// The most specific message on the current thread's HDF5 error stack (e.g. "unable to open file:
// name = 'x.h5', errno = 13, error message = 'Permission denied'"), or "" when the stack is empty.
std::string lastErrorMessage();

// Throws Error(code, what + ": " + lastErrorMessage()) when status is negative; returns status.
template <typename T> T check(T status, ErrorCode code, const std::string &what)
{
    if (status < 0) {
        std::string message = what;
        const std::string detail = lastErrorMessage();
        if (!detail.empty())
            message += " (HDF5: " + detail + ")";
        throw Error(code, message);
    }
    return status;
}

} // namespace kvwb::core::h5
