#include "core/hdf5_handle.h"

namespace kvwb::core::h5 {

void prepareLibrary() noexcept
{
    static const bool once = [] {
        H5dont_atexit(); // fails harmlessly when something else initialised HDF5 first
        return true;
    }();
    (void)once;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string lastErrorMessage()
{
    std::string message;
    // Walking upward starts at the innermost frame, where the failure was detected: that message
    // names the cause (errno text, "truncated file", ...); outer frames only say "unable to open".
    const auto visit = [](unsigned n, const H5E_error2_t *e, void *data) -> herr_t {
        auto *out = static_cast<std::string *>(data);
        if (n == 0 && e->desc)
            *out = e->desc;
        return 0;
    };
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &message);
    return message;
}

} // namespace kvwb::core::h5
