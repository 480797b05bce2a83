// The errors and the JSON parsing the tokenizer.json loaders share (core/tokenize/bpe_tokenizer.cpp,
// wordpiece_tokenizer.cpp); included by their .cpp files only.
#pragma once

#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace kvwb::core::tokenize_detail {

// Error(Tokenizer) "<source>: <what>".
[[noreturn]] inline void fail(const std::string &source, const std::string &what)
{
    throw Error(ErrorCode::Tokenizer, source + ": " + what);
}

// Error(Unsupported) "<source>: <what>".
[[noreturn]] inline void unsupported(const std::string &source, const std::string &what)
{
    throw Error(ErrorCode::Unsupported, source + ": " + what);
}

// jsonText parsed; where it is not JSON, fail(source, notJson + the parser's message).
inline nlohmann::json parseJson(std::string_view jsonText, const std::string &source, const char *notJson)
{
    try {
        return nlohmann::json::parse(jsonText.begin(), jsonText.end());
    } catch (const nlohmann::json::exception &e) {
        fail(source, std::string(notJson) + e.what());
    }
}

} // namespace kvwb::core::tokenize_detail
