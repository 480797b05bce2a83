// FieldReader: reads the fields of one JSON object (a config.json) and reports each fault as one
// Error(Config) line, "SOURCE: field 'prefix.name' must be ..., got ...". Private to core/model.
#pragma once

#include "core/util/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core::detail {

// Reads fields of one JSON object and reports faults as "SOURCE: field 'prefix.name' ...".
class FieldReader
{
public:
    FieldReader(const nlohmann::json &obj, const std::string &source, std::string prefix = {})
        : m_obj(obj), m_source(source), m_prefix(std::move(prefix))
    {}

    std::string fieldName(const char *name) const { return m_prefix.empty() ? name : m_prefix + "." + name; }

    // Missing and JSON null both mean "not given": HF writes null for unset optional fields.
    const nlohmann::json *find(const char *name) const
    {
        const auto it = m_obj.find(name);
        return it == m_obj.end() || it->is_null() ? nullptr : &*it;
    }

    [[noreturn]] void missing(const char *name) const
    {
        throw Error(ErrorCode::Config, fmt::format("{}: field '{}' is missing", m_source, fieldName(name)));
    }
    [[noreturn]] void wrongType(const char *name, const char *expected, const nlohmann::json &v) const
    {
        throw Error(ErrorCode::Config, fmt::format("{}: field '{}' must be {}, got {}", m_source,
                                                   fieldName(name), expected, v.dump()));
    }

    std::optional<int> optInt(const char *name) const
    {
        const nlohmann::json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_number_integer())
            wrongType(name, "an integer", *v);
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
            wrongType(name, "a 32-bit integer", *v);
        const int64_t x = v->get<int64_t>();
        if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
            wrongType(name, "a 32-bit integer", *v);
        return int(x);
    }
    int reqInt(const char *name) const
    {
        const auto v = optInt(name);
        if (!v)
            missing(name);
        return *v;
    }
    std::optional<double> optDouble(const char *name) const
    {
        const nlohmann::json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_number())
            wrongType(name, "a number", *v);
        return v->get<double>();
    }
    double reqDouble(const char *name) const
    {
        const auto v = optDouble(name);
        if (!v)
            missing(name);
        return *v;
    }
    std::optional<bool> optBool(const char *name) const
    {
        const nlohmann::json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_boolean())
            wrongType(name, "true or false", *v);
        return v->get<bool>();
    }
    // A list of at most maxCount finite numbers.
    std::optional<std::vector<double>> optDoubles(const char *name, size_t maxCount) const
    {
        const nlohmann::json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_array() || v->size() > maxCount)
            wrongType(name, fmt::format("a list of at most {} numbers", maxCount).c_str(), *v);
        std::vector<double> out;
        for (const nlohmann::json &x : *v) {
            if (!x.is_number() || !std::isfinite(x.get<double>()))
                wrongType(name, "a list of finite numbers", *v);
            out.push_back(x.get<double>());
        }
        return out;
    }
    std::optional<std::string> optString(const char *name) const
    {
        const nlohmann::json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_string())
            wrongType(name, "a string", *v);
        return v->get<std::string>();
    }

private:
    const nlohmann::json &m_obj;
    const std::string &m_source;
    std::string m_prefix;
};

} // namespace kvwb::core::detail
