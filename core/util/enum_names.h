// An enum's spellings in one table: each value with the one name flags, JSON, CSV and reports use,
// and the two functions every enum needs, derived from it (name of a value, value of a name).
//
//   inline constexpr EnumName<Color> kColorNames[] = {{Color::Red, "red"}, {Color::Blue, "blue"}};
//   enumName(kColorNames, Color::Red) == "red"; parseEnum(kColorNames, "blue") == Color::Blue
//
// Plain constexpr data and pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kvwb::core {

template <typename E> struct EnumName
{
    E value;
    const char *name;
};

// The value's name; "" for a value the table does not list.
template <typename E, size_t N>
constexpr const char *enumName(const EnumName<E> (&table)[N], E value) noexcept
{
    for (const auto &e : table)
        if (e.value == value)
            return e.name;
    return "";
}

// The value named `name`; nullopt for a name the table does not list.
template <typename E, size_t N>
constexpr std::optional<E> parseEnum(const EnumName<E> (&table)[N], std::string_view name) noexcept
{
    for (const auto &e : table)
        if (name == e.name)
            return e.value;
    return std::nullopt;
}

} // namespace kvwb::core
