#include "ui/report/report_text.h"

#include "core/util/error.h"

#include <QString>

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdint>

namespace kvwb::ui::report {

namespace fs = std::filesystem;

std::string exact(double v)
{
    return fmt::format("{}", v);
}

std::string shown(double v)
{
    if (std::isnan(v))
        return "n/a";
    if (std::isinf(v))
        return v > 0 ? "inf" : "-inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15)
        return fmt::format("{}", int64_t(v));
    return fmt::format("{:.4g}", v);
}

std::string percent(double fraction)
{
    return fmt::format("{:.1f}%", fraction * 100.0);
}

std::string joinInts(const std::vector<int> &v)
{
    std::string s;
    for (size_t i = 0; i < v.size(); ++i)
        s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}

void ensureDir(const fs::path &dir)
{
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw core::Error(core::ErrorCode::Io,
                          fmt::format("cannot create report directory {}: {}", dir.string(),
                                      ec ? ec.message() : std::string("not a directory")));
}

std::string safeName(const std::string &name)
{
    std::string s = name;
    for (char &c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
            c = '_';
    return s;
}

std::string tierLabel(core::TierKind k)
{
    return k == core::TierKind::None ? std::string("miss (model ran)") : std::string(core::tierKindName(k));
}

std::string htmlEscape(const std::string &s)
{
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

std::string validUtf8(const std::string &s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size())).toStdString();
}

} // namespace kvwb::ui::report
