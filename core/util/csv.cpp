#include "core/util/csv.h"

namespace kvwb::core {

void appendCsvField(std::string &out, std::string_view value)
{
    if (value.find_first_of(",\"\r\n") == std::string_view::npos) {
        out += value;
        return;
    }
    out += '"';
    for (char c : value) {
        if (c == '"')
            out += '"';
        out += c;
    }
    out += '"';
}

std::string csvField(std::string_view value)
{
    std::string out;
    appendCsvField(out, value);
    return out;
}

} // namespace kvwb::core
