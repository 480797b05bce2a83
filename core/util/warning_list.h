// Warnings collected by readers that skip malformed input instead of failing (partial success).
//
// Every warning is counted; only the first `cap` messages are kept so that a file with a million
// bad lines cannot exhaust memory. Thread-safety: value type, no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kvwb::core {

class WarningList
{
public:
    explicit WarningList(size_t cap = 100) : m_cap(cap) {}

    void add(std::string message)
    {
        ++m_total;
        if (m_messages.size() < m_cap)
            m_messages.push_back(std::move(message));
    }
    // All warnings, including those whose message was not kept.
    size_t total() const { return m_total; }
    bool empty() const { return m_total == 0; }
    const std::vector<std::string> &messages() const { return m_messages; }
    // The kept messages, one a line, plus "... and N more" when some were dropped.
    std::string summary() const
    {
        std::string s;
        for (const auto &m : m_messages)
            s += m + "\n";
        if (m_total > m_messages.size())
            s += "... and " + std::to_string(m_total - m_messages.size()) + " more\n";
        return s;
    }

private:
    size_t m_cap;
    size_t m_total = 0;
    std::vector<std::string> m_messages;
};

} // namespace kvwb::core
