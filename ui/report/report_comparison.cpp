#include "ui/report/report_comparison.h"

#include "ui/report/report_text.h"

#include <QString>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvwb::ui::report {

namespace {

// True when s does not end inside a multi-byte UTF-8 sequence.
bool endsOnCharacter(const std::string &s)
{
    size_t i = s.size(), continuation = 0;
    while (i > 0 && continuation < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
        --i;
        ++continuation;
    }
    if (i == 0 || continuation == 4)
        return true; // stray continuation bytes: nothing later completes them
    const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
    const size_t need = lead < 0x80             ? 1
                        : (lead & 0xE0) == 0xC0 ? 2
                        : (lead & 0xF0) == 0xE0 ? 3
                        : (lead & 0xF8) == 0xF0 ? 4
                                                : 1;
    return continuation + 1 >= need;
}

// A run of tokens holding whole characters: byte-level BPE can split one character over two
// pieces, and marking or shading half a character would produce invalid text.
struct Segment
{
    std::string text;
    int first = -1; // token indices; -1: the path has no pieces (text only)
    int last = -1;
};

std::vector<Segment> segmentsOf(const core::ComparisonPath &p)
{
    std::vector<Segment> out;
    if (p.pieces.empty()) {
        if (!p.text.empty())
            out.push_back({p.text, -1, -1});
        return out;
    }
    Segment cur;
    for (size_t i = 0; i < p.pieces.size(); ++i) {
        if (cur.first < 0)
            cur.first = int(i);
        cur.text += p.pieces[i];
        cur.last = int(i);
        if (endsOnCharacter(cur.text) || i + 1 == p.pieces.size()) {
            cur.text = validUtf8(cur.text);
            out.push_back(std::move(cur));
            cur = Segment{};
        }
    }
    return out;
}

bool holds(const Segment &g, int token)
{
    return g.first >= 0 && token >= g.first && token <= g.last;
}

// At most 400 characters of the prompt, with how much was left out.
std::string promptShown(const std::string &prompt, std::string *note)
{
    constexpr qsizetype kMax = 400;
    const QString q = QString::fromUtf8(prompt.data(), qsizetype(prompt.size()));
    if (q.size() <= kMax) {
        *note = fmt::format("{} characters", q.size());
        return q.toStdString();
    }
    *note = fmt::format("first {} of {} characters", kMax, q.size());
    return q.left(kMax).toStdString() + "\u2026";
}

std::string divergenceText(const core::ComparisonSample &s)
{
    return s.firstDivergence < 0 ? std::string("none (identical continuations)")
                                 : fmt::format("token {}", s.firstDivergence);
}

std::string comparisonMetrics(const core::ComparisonSample &s)
{
    std::string answer; // a prompt file's expected answer (kvwb corpus context)
    if (const auto hits = core::answerHits(s)) {
        const auto given = [](bool yes) { return yes ? "yes" : "no"; };
        answer = fmt::format(" Expected answer \u201c{}\u201d given by scratch {}, transfer {}, A {}.",
                             s.expectedAnswer, given(hits->scratch), given(hits->transfer), given(hits->a));
    }
    return fmt::format("KL to scratch {} nats (no-prefix floor {} nats); top-1 agreement {}; ROUGE-L {}; "
                       "TTFT scratch {} ms vs transfer {} ms (source prefill {} ms, convert {} ms); first "
                       "divergence: {}; gate {} = {} vs threshold {}: {}.",
                       shown(s.meanKl), shown(s.klNoPrefix), percent(s.top1), shown(s.rougeL),
                       shown(s.scratch.ttftMs), shown(s.transfer.ttftMs), shown(s.sourcePrefillMs),
                       shown(s.convertMs), divergenceText(s), s.gateSignal.empty() ? "-" : s.gateSignal,
                       shown(s.gateValue), shown(s.gateThreshold), s.gatePassed ? "passed" : "failed") +
           answer;
}

struct PathView
{
    const char *label;
    const core::ComparisonPath *path;
    bool marked;  // scratch and transfer: the first divergence is marked
    bool shadeKl; // transfer: tokens shaded by per-token KL
    std::string note;
};

std::vector<PathView> pathViews(const core::ComparisonSample &s)
{
    const auto tokens = [](const core::ComparisonPath &p) {
        return fmt::format("{} token(s), prompt {} token(s)", p.ids.size(), p.promptTokens);
    };
    return {
        {"A", &s.a, false, false, "model A, " + tokens(s.a)},
        {"B scratch", &s.scratch, true, false, "model B from its own prefill, " + tokens(s.scratch)},
        {"B transfer", &s.transfer, true, true,
         fmt::format("model B from A's cache converted by {}, {}, {} reused",
                     s.converter.empty() ? "-" : s.converter, tokens(s.transfer), s.transfer.reusedTokens)}};
}

// A fence longer than any run of backticks in text.
std::string fenceFor(const std::string &text)
{
    size_t longest = 0, run = 0;
    for (char c : text) {
        run = c == '`' ? run + 1 : 0;
        longest = std::max(longest, run);
    }
    return std::string(std::max<size_t>(3, longest + 1), '`');
}

// White at 0 nats to red at 2 nats or more.
std::string klColour(double kl)
{
    const double t = std::clamp(std::isfinite(kl) ? kl / 2.0 : 1.0, 0.0, 1.0);
    const int gb = int(std::lround(255.0 * (1.0 - t)));
    return fmt::format("#ff{:02x}{:02x}", gb, gb);
}

} // namespace

std::string comparisonMarkdown(const core::ComparisonSample &s)
{
    std::string md;
    const auto block = [&](const std::string &text) {
        const std::string fence = fenceFor(text);
        md += fence + "text\n" + text + "\n" + fence + "\n\n";
    };
    std::string note;
    const std::string prompt = promptShown(validUtf8(s.prompt), &note);
    md += "**Prompt** (" + note + "):\n\n";
    block(prompt);
    for (const PathView &v : pathViews(s)) {
        std::string text;
        const int fd = v.marked ? s.firstDivergence : -1;
        for (const Segment &g : segmentsOf(*v.path))
            text += holds(g, fd) ? "\u00ab" + g.text + "\u00bb" : g.text;
        if (fd >= 0 && size_t(fd) >= v.path->pieces.size())
            text += "\u00ab(end)\u00bb";
        md += "**" + std::string(v.label) + "** (" + v.note + "):\n\n";
        block(text);
    }
    md += comparisonMetrics(s) + "\n\n";
    return md;
}

std::string comparisonHtml(const core::ComparisonSample &s)
{
    // the texts in the body font at reading size (not a small monospace): they are what is compared
    const char *pre = "<pre style=\"white-space:pre-wrap;background:#f8f8f8;border:1px solid #ddd;"
                      "padding:4px;margin:0.2em 0 0.6em 0;font-family:'DejaVu Sans',Helvetica,Arial,"
                      "sans-serif;font-size:10pt\">";
    std::string h = "<div class=\"comparison\" style=\"margin:0.5em 0 1.2em 0\">\n";
    std::string note;
    const std::string prompt = promptShown(validUtf8(s.prompt), &note);
    h += "<p><b>Prompt</b> (" + htmlEscape(note) + "):</p>" + pre + htmlEscape(prompt) + "</pre>\n";
    for (const PathView &v : pathViews(s)) {
        const int fd = v.marked ? s.firstDivergence : -1;
        std::string body;
        for (const Segment &g : segmentsOf(*v.path)) {
            std::string piece = htmlEscape(g.text);
            if (v.shadeKl && g.first >= 0 && size_t(g.first) < v.path->kl.size()) {
                double kl = 0;
                for (int t = g.first; t <= g.last && size_t(t) < v.path->kl.size(); ++t)
                    kl = std::max(kl, v.path->kl[size_t(t)]);
                piece = fmt::format("<span style=\"background-color:{}\" title=\"KL {} nats\">{}</span>",
                                    klColour(kl), shown(kl), piece);
            }
            // The divergent token: bold, underlined and boxed, in black, so that it stays readable on the
            // deep red of a high KL (red text on it read as a solid red block).
            if (holds(g, fd))
                piece = "<b><u class=\"divergence\" style=\"text-decoration:underline;color:#000000;"
                        "outline:2px solid #b00000\">" +
                        piece + "</u></b>";
            body += piece;
        }
        if (fd >= 0 && size_t(fd) >= v.path->pieces.size())
            body +=
                "<b><u class=\"divergence\" style=\"text-decoration:underline;color:#b00000\">(end)</u></b>";
        h += "<p><b>" + std::string(v.label) + "</b> (" + htmlEscape(v.note) + "):</p>" + pre + body +
             "</pre>\n";
    }
    h += "<p>" + htmlEscape(comparisonMetrics(s)) + "</p>\n</div>\n";
    return h;
}

} // namespace kvwb::ui::report
