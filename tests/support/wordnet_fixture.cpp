#include "tests/support/wordnet_fixture.h"

#include "tests/support/test_paths.h"

#include <cstdio>
#include <map>

namespace kvwb::test {

namespace {

struct Ptr
{
    std::string symbol;
    int offset;
};

struct Syn
{
    int offset;
    int lexFile;
    std::vector<std::pair<std::string, int>> words; // raw lemma (underscores), lex_id
    std::vector<Ptr> ptrs;
    std::string gloss;
};

std::string fmtOffset(int off)
{
    char b[16];
    std::snprintf(b, sizeof b, "%08d", off);
    return b;
}

std::string dataLine(const Syn &s)
{
    char b[64];
    std::snprintf(b, sizeof b, "%s %02d n %02x", fmtOffset(s.offset).c_str(), s.lexFile,
                  unsigned(s.words.size()));
    std::string line = b;
    for (const auto &[w, id] : s.words) {
        std::snprintf(b, sizeof b, " %x", unsigned(id));
        line += " " + w + b;
    }
    std::snprintf(b, sizeof b, " %03d", int(s.ptrs.size()));
    line += b;
    for (const auto &p : s.ptrs)
        line += " " + p.symbol + " " + fmtOffset(p.offset) + " n 0000";
    return line + " | " + s.gloss + "  ";
}

std::string lowerForm(std::string s)
{
    for (char &c : s)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

} // namespace

WordNetFixture writeWordNetFixture(const std::filesystem::path &dir, int extraLeaves, bool withMalformed)
{
    std::vector<Syn> syns = {
        {1740,
         3,
         {{"entity", 0}},
         {{"~", 2000}, {"~", 3000}, {"~", 6000}, {"~", 4000}, {"~", 7000}},
         "that which is perceived or known or inferred to have its own distinct existence"},
        {2000,
         6,
         {{"vehicle", 0}},
         {{"@", 1740}, {"~", 2100}, {"~", 2200}, {"~", 2300}, {"~", 2400}, {"~", 2500}},
         "a conveyance that transports people or objects"},
        {2100,
         6,
         {{"car", 0}, {"auto", 0}, {"automobile", 0}, {"motorcar", 0}},
         {{"@", 2000}},
         "a motor vehicle with four wheels; usually propelled by an internal combustion engine; "
         "\"he needs a car to get to work\""},
        {2200,
         6,
         {{"truck", 0}, {"motortruck", 0}},
         {{"@", 2000}},
         "an automotive vehicle suitable for hauling"},
        {2300,
         6,
         {{"bicycle", 0}, {"bike", 0}, {"cycle", 0}},
         {{"@", 2000}},
         "a wheeled vehicle that has two wheels and is moved by foot pedals"},
        {2400, 6, {{"boat", 0}}, {{"@", 2000}}, "a small vessel for travel on water"},
        {2500,
         6,
         {{"car", 1}, {"railcar", 0}},
         {{"@", 2000}},
         "a wheeled vehicle adapted to the rails of railroad; \"three cars had jumped the rails\""},
        {3000,
         13,
         {{"fruit", 0}},
         {{"@", 1740}, {"~", 3100}, {"~", 3200}, {"~", 3300}, {"~", 3400}},
         "the ripened reproductive body of a seed plant"},
        {3100,
         13,
         {{"apple", 0}},
         {{"@", 3000}},
         "fruit with red or yellow or green skin and sweet to tart crisp whitish flesh"},
        {3200,
         13,
         {{"orange", 0}},
         {{"@", 3000}},
         "round yellow to orange fruit of any of several citrus trees"},
        {3300,
         13,
         {{"banana", 0}},
         {{"@", 3000}},
         "elongated crescent-shaped yellow fruit with soft sweet flesh"},
        {3400, 13, {{"pear", 0}}, {{"@", 3000}}, "sweet juicy gritty-textured fruit"},
        {4000,
         28,
         {{"hour", 0}, {"hr", 0}, {"60_minutes", 0}},
         {{"@", 1740}},
         "a period of time equal to 1/60 of a day; \"a lunch hour\"; \"he spent an hour waiting\""},
        {5000,
         15,
         {{"Paris", 0}, {"City_of_Light", 0}, {"French_capital", 0}},
         {{"@i", 6000}},
         "the capital and largest city of France"},
        {6000, 15, {{"national_capital", 0}}, {{"@", 1740}, {"~i", 5000}}, "the capital city of a nation"},
        {7000, 6, {{"gadget", 0}, {"appliance", 0}}, {{"@", 1740}}, "\"only an example, no definition\""},
    };
    std::map<std::string, int> counts = {
        {"car%1:06:00::", 100},    {"auto%1:06:00::", 5},     {"automobile%1:06:00::", 20},
        {"truck%1:06:00::", 30},   {"bicycle%1:06:00::", 25}, {"boat%1:06:00::", 40},
        {"vehicle%1:06:00::", 35}, {"apple%1:13:00::", 50},   {"orange%1:13:00::", 15},
        {"banana%1:13:00::", 10},  {"pear%1:13:00::", 3},     {"hour%1:28:00::", 60},
        {"paris%1:15:00::", 8},    {"car%1:06:01::", 7},      {"fruit%1:13:00::", 12},
        {"entity%1:03:00::", 2},
    };
    for (int k = 1; k <= extraLeaves; ++k) {
        const int off = 100000 + k * 10;
        syns[15].ptrs.push_back({"~", off});
        syns.push_back({off,
                        6,
                        {{"gadget_" + std::to_string(k), 0}},
                        {{"@", 7000}},
                        "a small device of model " + std::to_string(k)});
        // Tag counts decrease with k and stay below every named concept's but one.
        counts["gadget_" + std::to_string(k) + "%1:06:00::"] = 1;
    }

    WordNetFixture fx;
    std::string data = "  1 This software and database is being provided to you, the LICENSEE, by  \n"
                       "  2 Princeton University under the following license.  \n";
    int line = 2;
    for (size_t i = 0; i < syns.size(); ++i) {
        data += dataLine(syns[i]) + "\n";
        ++line;
        if (withMalformed && i == 3) {
            data += "00009999 03 n zz broken 0 000 | w_cnt is not hex  \n";
            fx.badDataLines.push_back(++line);
            data += "garbage without a gloss separator\n";
            fx.badDataLines.push_back(++line);
            data += "00009998 06 n 01 dangling 0 002 @ 00002000 n 0000 | fewer pointers than p_cnt  \n";
            fx.badDataLines.push_back(++line);
        }
    }
    writeFile(dir / "data.noun", data);

    std::map<std::string, std::vector<int>> index; // sense order = file order
    for (const auto &s : syns)
        for (const auto &[w, id] : s.words)
            index[lowerForm(w)].push_back(s.offset);
    std::string idx = "  1 This software and database is being provided to you, the LICENSEE, by  \n";
    line = 1;
    for (const auto &[lemma, offs] : index) {
        idx += lemma + " n " + std::to_string(offs.size()) + " 1 @ " + std::to_string(offs.size()) + " 0";
        for (int o : offs)
            idx += " " + fmtOffset(o);
        idx += "  \n";
        ++line;
        if (withMalformed && lemma == "bike") {
            idx += "bogus n 3 0 1 0 00002100\n";
            fx.badIndexLines.push_back(++line);
        }
    }
    writeFile(dir / "index.noun", idx);

    std::string cnt;
    line = 0;
    for (const auto &[key, c] : counts) {
        // Sense number: the position of the key's synset in the lemma's index line.
        const int sense = key.ends_with(":01::") ? 2 : 1;
        cnt += key + " " + std::to_string(sense) + " " + std::to_string(c) + "\n";
        ++line;
    }
    if (withMalformed) {
        cnt += "missing_fields\n";
        fx.badCountLines.push_back(++line);
        cnt += "zebra%1:05:00:: 1 9\n";
        fx.unmatchedCountLines.push_back(++line);
        cnt += "car%1:06:07:: 1 9\n"; // lex_id 7 names no sense of "car"
        fx.unmatchedCountLines.push_back(++line);
        cnt += "eat%2:34:00:: 1 61\n"; // a verb: skipped silently, verbs are not loaded
        ++line;
    }
    writeFile(dir / "cntlist.rev", cnt);
    return fx;
}

} // namespace kvwb::test
