#include "core/util/error.h"

namespace kvwb::core {

const char *errorCodeName(ErrorCode code) noexcept
{
    switch (code) {
    case ErrorCode::Io:
        return "io";
    case ErrorCode::Format:
        return "format";
    case ErrorCode::Config:
        return "config";
    case ErrorCode::Unsupported:
        return "unsupported";
    case ErrorCode::Shape:
        return "shape";
    case ErrorCode::Tokenizer:
        return "tokenizer";
    case ErrorCode::InvalidArgument:
        return "invalid-argument";
    case ErrorCode::Device:
        return "device";
    case ErrorCode::Internal:
        return "internal";
    }
    return "unknown";
}

Error::Error(ErrorCode code, const std::string &message) : std::runtime_error(message), m_code(code) {}

} // namespace kvwb::core
