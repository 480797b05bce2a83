#include "core/util/build_info.h"

#ifndef KVWB_VERSION
#define KVWB_VERSION "unknown"
#endif
#ifndef KVWB_GIT_COMMIT
#define KVWB_GIT_COMMIT "unknown"
#endif

namespace kvwb::core {

const char *appVersion() noexcept
{
    return KVWB_VERSION;
}

const char *gitCommit() noexcept
{
    return KVWB_GIT_COMMIT;
}

} // namespace kvwb::core
