// One row of a job's settings table: a setting's flag, help text, value name, JSON key and how its
// text is read into and written from the settings value S. Each job has one table
// (core/settings/replay_settings.h, compare_settings.h); the command line registers its options from
// it, and the project file, the window's request and the settings stored with a result are written
// and read through it.
//
// Plain values; a table is built once and read from any thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace kvwb::core {

enum class SettingScope
{
    Setting, // a job setting: in the project file and in the settings stored with a result
    Input,   // what the job reads (workload, prompts, converter): in the stored settings only
    Run      // this invocation's models and outputs: neither
};

enum class SettingKind
{
    Switch,  // a flag without a value; in JSON a boolean (the field's value)
    Value,   // one value; in JSON a string or a number (SettingJson)
    List,    // comma-separated values (one flag); in JSON an array of strings
    Repeated // the flag given once per value; in JSON an array of strings
};

enum class SettingJson
{
    String,
    Integer,
    Real
};

template <typename S> struct SettingRow
{
    using Scope = SettingScope;
    using Kind = SettingKind;
    using Json = SettingJson;

    const char *name = "";       // the flag without "--"
    const char *alias = nullptr; // an older name of the flag, still accepted (its JSON key too)
    const char *valueName = "";  // "" for a switch
    const char *help = "";
    Scope scope = Scope::Setting;
    Kind kind = Kind::Value;
    Json json = Json::String; // a Value's JSON type
    // The JSON key: the flag with '_' for '-', or the field's own name for a switch (no_gate: "gate").
    const char *jsonKey = nullptr;
    // Reads one value (a switch: "" sets it): Error(InvalidArgument) with what is wrong, not naming
    // the flag ("expects an integer >= 1, got 'x'"), for the caller to prefix.
    std::function<void(S &, const std::string &)> set;
    // The values as the flag takes them (a switch: "true" / "false" for its field).
    std::function<std::vector<std::string>(const S &)> get;
    // A Repeated row: back to no values (each set appends one).
    std::function<void(S &)> reset;

    std::string key() const
    {
        std::string k = jsonKey ? jsonKey : name;
        for (char &c : k)
            c = c == '-' ? '_' : c;
        return k;
    }
};

} // namespace kvwb::core
