// A reader of tab-separated records (Quora's question pairs file, labelled pair files): fields
// separated by '\t', records by "\n" or "\r\n"; a field that starts with '"' runs to the next '"'
// not doubled and may hold tabs and line breaks ("" is a quote). A malformed record says why in
// `problem` and the rest of its line is skipped, so a reader can warn and go on.
//
// Thread-safety: a reader is one thread's; it reads a view the caller keeps alive.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

struct TsvRecord
{
    size_t line = 0; // where the record starts
    std::vector<std::string> fields;
    std::string problem; // set when the record is malformed (the rest of its line was skipped)
};

class TsvReader
{
public:
    explicit TsvReader(std::string_view text) : m_text(text) {}

    // false at the end of the text.
    bool next(TsvRecord &rec)
    {
        if (m_pos >= m_text.size())
            return false;
        rec = TsvRecord{};
        rec.line = m_line;
        for (;;) {
            std::string field;
            if (peek() == '"') {
                const size_t opened = m_line;
                ++m_pos;
                for (;;) {
                    if (m_pos >= m_text.size()) {
                        rec.problem = "quoted field " + std::to_string(rec.fields.size() + 1) +
                                      " opened on line " + std::to_string(opened) + " is not closed";
                        return true;
                    }
                    const char c = m_text[m_pos++];
                    if (c == '"') {
                        if (peek() != '"')
                            break;
                        ++m_pos;
                    } else if (c == '\n') {
                        ++m_line;
                    }
                    field += c;
                }
                if (!atSeparator()) {
                    rec.problem =
                        "text after the closing quote of field " + std::to_string(rec.fields.size() + 1);
                    skipLine();
                    return true;
                }
            } else {
                while (!atSeparator())
                    field += m_text[m_pos++];
            }
            rec.fields.push_back(std::move(field));
            if (m_pos >= m_text.size())
                return true;
            if (m_text[m_pos] == '\t') {
                ++m_pos;
                continue;
            }
            skipLine(); // at "\n" or "\r\n"
            return true;
        }
    }

private:
    char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }
    bool atSeparator() const
    {
        if (m_pos >= m_text.size())
            return true;
        const char c = m_text[m_pos];
        return c == '\t' || c == '\n' ||
               (c == '\r' && m_pos + 1 < m_text.size() && m_text[m_pos + 1] == '\n');
    }
    void skipLine()
    {
        const size_t end = m_text.find('\n', m_pos);
        m_pos = end == std::string_view::npos ? m_text.size() : end + 1;
        ++m_line;
    }

    std::string_view m_text;
    size_t m_pos = 0;
    size_t m_line = 1;
};

} // namespace kvwb::core
