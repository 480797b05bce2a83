// The row builders and the JSON reading and writing every settings table shares
// (core/settings/setting_table.h); included by the settings room's .cpp files only.
#pragma once

#include "core/cache/gate_signal.h"
#include "core/settings/setting_table.h"
#include "core/util/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core::settings_detail {

using json = nlohmann::json;
using Scope = SettingScope;
using Kind = SettingKind;

[[noreturn]] inline void bad(const std::string &what)
{
    throw Error(ErrorCode::InvalidArgument, what);
}

template <typename Int> std::optional<Int> parseInteger(const std::string &text)
{
    Int v{};
    const char *end = text.data() + text.size();
    const auto [at, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || at != end || text.empty())
        return std::nullopt;
    return v;
}

inline std::optional<double> parseReal(const std::string &text)
{
    double v = 0;
    const char *begin = text.data(), *end = text.data() + text.size();
    if (begin != end && *begin == '+')
        ++begin;
    const auto [at, ec] = std::from_chars(begin, end, v);
    if (ec != std::errc() || at != end || begin == end)
        return std::nullopt;
    return v;
}

// The shortest text that reads back as the same double.
inline std::string realText(double v)
{
    return fmt::format("{}", v);
}

// Integers in [lo, hi]; the message says ">= lo" when there is no upper bound.
template <typename Int> Int readInteger(const std::string &text, Int lo, Int hi)
{
    const auto v = parseInteger<Int>(text);
    if (!v || *v < lo || *v > hi) {
        if (hi == std::numeric_limits<Int>::max())
            bad(fmt::format("expects an integer >= {}, got '{}'", lo, text));
        bad(fmt::format("expects an integer in [{}, {}], got '{}'", lo, hi, text));
    }
    return *v;
}

inline double readReal(const std::string &text, double lo, double hi)
{
    const auto v = parseReal(text);
    if (!v || !(*v >= lo && *v <= hi)) // NaN is in no range
        bad(fmt::format("expects a number in [{}, {}], got '{}'", lo, hi, text));
    return *v;
}

template <typename S>
SettingRow<S> row(const char *name, const char *valueName, const char *help, Scope scope, Kind kind,
                  SettingJson json = SettingJson::String)
{
    SettingRow<S> f;
    f.name = name;
    f.valueName = valueName;
    f.help = help;
    f.scope = scope;
    f.kind = kind;
    f.json = json;
    return f;
}

// A setting held in a group of settings: s.*group.*field (ReplaySettings::knowledge, say). Any row
// builder below takes one where it takes a member pointer (with S given: `integer<S, int>(...)`).
template <typename S, typename G, typename T> struct Nested
{
    G S::*group;
    T G::*field;
    T &operator()(S &s) const { return s.*group.*field; }
    const T &operator()(const S &s) const { return s.*group.*field; }
};
template <typename S, typename G, typename T> Nested<S, G, T> nested(G S::*group, T G::*field)
{
    return {group, field};
}

template <typename S, typename F = std::string S::*>
SettingRow<S> text(const char *name, const char *valueName, const char *help, F field,
                   Scope scope = Scope::Setting)
{
    SettingRow<S> f = row<S>(name, valueName, help, scope, Kind::Value);
    f.set = [field](S &s, const std::string &v) { std::invoke(field, s) = v; };
    f.get = [field](const S &s) { return std::vector<std::string>{std::invoke(field, s)}; };
    return f;
}
template <typename S>
SettingRow<S> text(const char *name, const char *valueName, const char *help, std::string S::*field,
                   Scope scope = Scope::Setting)
{
    return text<S, std::string S::*>(name, valueName, help, field, scope);
}

template <typename S, typename Int, typename F = Int S::*>
SettingRow<S> integer(const char *name, const char *valueName, const char *help, F field, Int lo,
                      Int hi = std::numeric_limits<Int>::max())
{
    SettingRow<S> f = row<S>(name, valueName, help, Scope::Setting, Kind::Value, SettingJson::Integer);
    f.set = [field, lo, hi](S &s, const std::string &v) {
        std::invoke(field, s) = readInteger<Int>(v, lo, hi);
    };
    f.get = [field](const S &s) { return std::vector<std::string>{std::to_string(std::invoke(field, s))}; };
    return f;
}

// A non-negative count where 0 means none or unlimited.
template <typename S, typename F = int64_t S::*>
SettingRow<S> count(const char *name, const char *valueName, const char *help, F field)
{
    SettingRow<S> f = integer<S, int64_t>(name, valueName, help, field, 0);
    f.set = [field](S &s, const std::string &v) {
        const auto n = parseInteger<int64_t>(v);
        if (!n || *n < 0)
            bad("expects a non-negative integer, got '" + v + "'");
        std::invoke(field, s) = *n;
    };
    return f;
}
template <typename S>
SettingRow<S> count(const char *name, const char *valueName, const char *help, int64_t S::*field)
{
    return count<S, int64_t S::*>(name, valueName, help, field);
}

template <typename S, typename F = double S::*>
SettingRow<S> real(const char *name, const char *valueName, const char *help, F field, double lo, double hi)
{
    SettingRow<S> f = row<S>(name, valueName, help, Scope::Setting, Kind::Value, SettingJson::Real);
    f.set = [field, lo, hi](S &s, const std::string &v) { std::invoke(field, s) = readReal(v, lo, hi); };
    f.get = [field](const S &s) { return std::vector<std::string>{realText(std::invoke(field, s))}; };
    return f;
}
template <typename S>
SettingRow<S> real(const char *name, const char *valueName, const char *help, double S::*field, double lo,
                   double hi)
{
    return real<S, double S::*>(name, valueName, help, field, lo, hi);
}

template <typename S, typename F = bool S::*>
SettingRow<S> toggle(const char *name, const char *help, F field, bool whenSet, const char *jsonKey,
                     Scope scope = Scope::Setting)
{
    SettingRow<S> f = row<S>(name, "", help, scope, Kind::Switch);
    f.jsonKey = jsonKey;
    f.set = [field, whenSet](S &s, const std::string &v) {
        if (v.empty())
            std::invoke(field, s) = whenSet;
        else if (v == "true" || v == "false")
            std::invoke(field, s) = v == "true";
        else
            bad("expects true or false, got '" + v + "'");
    };
    f.get = [field](const S &s) {
        return std::vector<std::string>{std::invoke(field, s) ? "true" : "false"};
    };
    return f;
}
template <typename S>
SettingRow<S> toggle(const char *name, const char *help, bool S::*field, bool whenSet, const char *jsonKey,
                     Scope scope = Scope::Setting)
{
    return toggle<S, bool S::*>(name, help, field, whenSet, jsonKey, scope);
}

// One of a set of names, read by `parse` and written by `name`.
template <typename S, typename F, typename Parse, typename Name>
SettingRow<S> choiceOf(const char *name, const char *valueName, const char *help, F field, Parse parse,
                       Name nameOf, const char *expected)
{
    SettingRow<S> f = row<S>(name, valueName, help, Scope::Setting, Kind::Value);
    f.set = [field, parse, expected](S &s, const std::string &v) {
        const auto t = parse(v);
        if (!t)
            bad(std::string("expects ") + expected + ", got '" + v + "'");
        std::invoke(field, s) = *t;
    };
    f.get = [field, nameOf](const S &s) { return std::vector<std::string>{nameOf(std::invoke(field, s))}; };
    return f;
}
template <typename S, typename T, typename Parse, typename Name>
SettingRow<S> choice(const char *name, const char *valueName, const char *help, T S::*field, Parse parse,
                     Name nameOf, const char *expected)
{
    return choiceOf<S>(name, valueName, help, field, parse, nameOf, expected);
}
template <typename S, typename G, typename T, typename Parse, typename Name>
SettingRow<S> choice(const char *name, const char *valueName, const char *help, Nested<S, G, T> field,
                     Parse parse, Name nameOf, const char *expected)
{
    return choiceOf<S>(name, valueName, help, field, parse, nameOf, expected);
}

template <typename S> bool rowsEqual(const std::vector<SettingRow<S>> &rows, const S &x, const S &y)
{
    for (const auto &f : rows)
        if (f.get(x) != f.get(y))
            return false;
    return true;
}

template <typename S>
const SettingRow<S> *findRow(const std::vector<SettingRow<S>> &rows, const std::string &name)
{
    for (const auto &f : rows)
        if (name == f.name || (f.alias && name == f.alias))
            return &f;
    return nullptr;
}

template <typename S>
json rowsToJson(const std::vector<SettingRow<S>> &rows, const S &s,
                std::initializer_list<SettingScope> scopes)
{
    json out = json::object();
    for (const auto &f : rows) {
        if (std::find(scopes.begin(), scopes.end(), f.scope) == scopes.end())
            continue;
        const auto values = f.get(s);
        if (f.kind == Kind::Switch)
            out[f.key()] = values.at(0) == "true";
        else if (f.kind != Kind::Value)
            out[f.key()] = values;
        else if (f.json == SettingJson::Integer)
            out[f.key()] = std::stoll(values.at(0));
        else if (f.json == SettingJson::Real)
            out[f.key()] = std::stod(values.at(0));
        else
            out[f.key()] = values.at(0);
    }
    return out;
}

template <typename S> void setRowFromJson(S &s, const SettingRow<S> &f, const json &v)
{
    switch (f.kind) {
    case Kind::Switch:
        if (!v.is_boolean())
            bad("must be true or false");
        f.set(s, v.get<bool>() ? "true" : "false");
        return;
    case Kind::Value:
        if (f.json == SettingJson::Integer) {
            if (!v.is_number_integer())
                bad("must be an integer");
            f.set(s, std::to_string(v.get<int64_t>()));
        } else if (f.json == SettingJson::Real) {
            if (!v.is_number())
                bad("must be a number");
            f.set(s, v.is_number_float() ? realText(v.get<double>()) : std::to_string(v.get<int64_t>()));
        } else {
            if (!v.is_string())
                bad("must be a string");
            f.set(s, v.get<std::string>());
        }
        return;
    case Kind::List:
    case Kind::Repeated: {
        if (!v.is_array())
            bad("must be a list of strings");
        std::vector<std::string> items;
        for (const auto &x : v) {
            if (!x.is_string())
                bad("must be a list of strings");
            items.push_back(x.get<std::string>());
        }
        if (f.kind == Kind::Repeated) { // each value appends: start from none
            f.reset(s);
            for (const auto &x : items)
                f.set(s, x);
            return;
        }
        std::string joined;
        for (const auto &x : items)
            joined += (joined.empty() ? "" : ",") + x;
        f.set(s, joined.empty() ? "none" : joined);
        return;
    }
    }
}

// The Setting and Input rows present in `object`; other keys are ignored. Error(Config)
// "`where`: field '<section>.<key>' ..." for a bad value.
template <typename S>
S rowsFromJson(const std::vector<SettingRow<S>> &rows, const json &object, const std::string &where,
               const std::string &section)
{
    S s;
    if (!object.is_object())
        throw Error(ErrorCode::Config, where + ": field '" + section + "' must be an object");
    for (const auto &f : rows) {
        std::string key = f.key();
        if (!object.contains(key) && f.alias) // written under the flag's older name
        {
            SettingRow<S> old;
            old.name = f.alias;
            key = old.key();
        }
        if (f.scope == Scope::Run || !object.contains(key))
            continue;
        try {
            setRowFromJson(s, f, object.at(key));
        } catch (const Error &e) {
            throw Error(ErrorCode::Config, where + ": field '" + section + "." + f.key() + "' " + e.what());
        }
    }
    return s;
}

} // namespace kvwb::core::settings_detail

namespace kvwb::core::settings_detail {

// The gate signal (tail_kl, kv_cos, attn_cos or nll), which also sets the signal's own default
// threshold; a gate threshold row, read after it, overrides it. S has gateSignal and gateThreshold.
template <typename S> SettingRow<S> gateSignalRow(const char *help)
{
    constexpr const char *kExpected = "tail_kl, kv_cos, attn_cos or nll";
    SettingRow<S> f = choice(
        "gate-signal", "S", help, &S::gateSignal, [](const std::string &v) { return parseGateSignal(v); },
        gateSignalName, kExpected);
    f.set = [kExpected](S &s, const std::string &v) {
        const auto g = parseGateSignal(v);
        if (!g)
            bad(std::string("expects ") + kExpected + ", got '" + v + "'");
        s.gateSignal = *g;
        s.gateThreshold = defaultGateThreshold(*g);
    };
    return f;
}

} // namespace kvwb::core::settings_detail

// What every settings type defines from its table builder `makeRows` (in namespace kvwb::core):
// operator== (row by row), the table itself (built once) and a row by flag name (nullptr for none).
#define KVWB_SETTING_TABLE(S, tableFn, findFn, makeRows)                                                     \
    bool operator==(const S &x, const S &y)                                                                  \
    {                                                                                                        \
        return rowsEqual(tableFn(), x, y);                                                                   \
    }                                                                                                        \
    const std::vector<SettingRow<S>> &tableFn()                                                              \
    {                                                                                                        \
        static const std::vector<SettingRow<S>> rows = makeRows();                                           \
        return rows;                                                                                         \
    }                                                                                                        \
    const SettingRow<S> *findFn(const std::string &name)                                                     \
    {                                                                                                        \
        return findRow(tableFn(), name);                                                                     \
    }
