// Private to gpu/: turns LibTorch failures (c10::Error: out of memory, device errors) into the
// project's Error at the seam, keeping only the first line of torch's message.
#pragma once

#include "core/util/error.h"

#include <torch/torch.h>

#include <string>

namespace kvwb::gpu::detail {

template <typename F> auto translateTorch(const char *what, F &&f) -> decltype(f())
{
    try {
        return f();
    } catch (const c10::Error &e) {
        std::string msg = e.what_without_backtrace();
        if (auto nl = msg.find('\n'); nl != std::string::npos)
            msg.resize(nl);
        throw core::Error(core::ErrorCode::Device, std::string(what) + ": " + msg);
    }
}

} // namespace kvwb::gpu::detail
