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

// An enum's two functions, derived from its table:
//   KVWB_ENUM_NAMES(Color, kColorNames, colorName, parseColor)
// defines `const char *colorName(Color)` (enumName) and `std::optional<Color> parseColor(std::string_view)`
// (parseEnum) in the enclosing namespace.
#define KVWB_ENUM_NAMES(Enum, table, nameFunction, parseFunction)                                            \
    inline const char *nameFunction(Enum value) noexcept                                                     \
    {                                                                                                        \
        return ::kvwb::core::enumName(table, value);                                                         \
    }                                                                                                        \
    inline std::optional<Enum> parseFunction(std::string_view name) noexcept                                 \
    {                                                                                                        \
        return ::kvwb::core::parseEnum(table, name);                                                         \
    }
