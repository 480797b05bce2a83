// The single error type thrown by core/ and gpu/.
//
// Every failure a user can cause (bad file, bad flag, unsupported model) is reported as a
// kvwb::core::Error carrying a stable code and a one-line message that names the file, tensor,
// line or field at fault. Foreign failures (c10::Error, HDF5 status, std::system_error) are
// translated into this type at the seam where they occur. Thread-safety: value type, no state.
#pragma once

#include <stdexcept>
#include <string>

namespace kvwb::core {

// Stable codes: scripts and tests match on these, so never renumber them.
enum class ErrorCode
{
    Io = 1,              // path missing, unreadable, unwritable, short read, disk full
    Format = 2,          // file contents are malformed (bad header, truncated, not JSON, ...)
    Config = 3,          // a configuration field is missing or has an invalid value
    Unsupported = 4,     // well-formed input that names something we do not implement
    Shape = 5,           // a tensor's dtype/shape does not match what the model needs
    Tokenizer = 6,       // tokenizer malformed or incompatible with the model
    InvalidArgument = 7, // caller passed a bad value (command-line flag, API precondition)
    Device = 8,          // requested device/dtype is not available
    Internal = 9,        // a bug: an invariant did not hold
};

const char *errorCodeName(ErrorCode code) noexcept;

class Error : public std::runtime_error
{
public:
    Error(ErrorCode code, const std::string &message);
    ErrorCode code() const noexcept { return m_code; }

private:
    ErrorCode m_code;
};

} // namespace kvwb::core
