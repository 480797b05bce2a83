// selectShard: N shards of a corpus are disjoint, together the whole corpus in its order; a
// concept's documents (both splits) stay in one shard; documents without a rank go by their
// position in their split.
#include "core/util/error.h"
#include "core/workload/corpus_shard.h"

#include <QTest>

#include <set>

using namespace kvwb::core;

namespace {

TextDocument doc(const std::string &text, int rank, bool validation)
{
    TextDocument d;
    d.text = text;
    d.rank = rank;
    d.validation = validation;
    return d;
}

std::vector<std::string> texts(const TextCorpus &c)
{
    std::vector<std::string> out;
    for (const auto &d : c.documents)
        out.push_back(d.text);
    return out;
}

} // namespace

class TestCorpusShard : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void byConceptRank()
    {
        TextCorpus c;
        for (int rank : {0, 1, 2, 3, 4, 5})
            for (bool validation : {false, true})
                c.documents.push_back(doc(std::to_string(rank) + (validation ? "v" : "t"), rank, validation));
        c.warnings = {"corpus.jsonl:9: not a JSON object"};
        c.skipped = 1;
        const auto odd = selectShard(c, {1, 2});
        QCOMPARE(texts(odd), (std::vector<std::string>{"1t", "1v", "3t", "3v", "5t", "5v"}));
        QCOMPARE(odd.warnings, c.warnings);
        QCOMPARE(odd.skipped, size_t(1));
        QCOMPARE(texts(selectShard(c, {0, 3})), (std::vector<std::string>{"0t", "0v", "3t", "3v"}));
        QCOMPARE(texts(selectShard(c, {0, 1})), texts(c));

        // N shards: disjoint, every document in one of them
        for (int n : {2, 3, 5, 7}) {
            std::multiset<std::string> all;
            for (int i = 0; i < n; ++i)
                for (const auto &t : texts(selectShard(c, {i, n})))
                    all.insert(t);
            QCOMPARE(all.size(), c.documents.size());
            QCOMPARE(std::set<std::string>(all.begin(), all.end()).size(), c.documents.size());
        }
    }

    // plain text: validation lines are every 20th, so sharding by line number would put them all
    // in one shard; each split is counted on its own instead
    void unrankedByPositionInSplit()
    {
        TextCorpus c;
        for (int i = 0; i < 6; ++i)
            c.documents.push_back(doc("t" + std::to_string(i), -1, false));
        c.documents.push_back(doc("v0", -1, true));
        c.documents.push_back(doc("t6", -1, false));
        c.documents.push_back(doc("v1", -1, true));
        QCOMPARE(texts(selectShard(c, {0, 2})), (std::vector<std::string>{"t0", "t2", "t4", "v0", "t6"}));
        QCOMPARE(texts(selectShard(c, {1, 2})), (std::vector<std::string>{"t1", "t3", "t5", "v1"}));
    }

    void badShards_data()
    {
        QTest::addColumn<int>("index");
        QTest::addColumn<int>("count");
        QTest::newRow("index = count") << 2 << 2;
        QTest::newRow("negative index") << -1 << 2;
        QTest::newRow("no parts") << 0 << 0;
    }

    void badShards()
    {
        QFETCH(int, index);
        QFETCH(int, count);
        TextCorpus c;
        c.documents.push_back(doc("x", 0, false));
        QVERIFY_THROWS_EXCEPTION(Error, selectShard(c, {index, count}));
    }
};

QTEST_GUILESS_MAIN(TestCorpusShard)
#include "tst_corpus_shard.moc"
