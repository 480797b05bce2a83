// Q/A corpus: question rendering (a/an, synonyms), answers, concept selection with lemma
// ownership, the split by template, the examples-per-concept rule and seeded reproducibility.
#include "core/util/error.h"
#include "core/workload/corpus.h"
#include "core/workload/text_corpus.h"
#include "tests/support/test_paths.h"
#include "tests/support/wordnet_fixture.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>

using namespace kvwb::core;
namespace fs = std::filesystem;

class TestCorpus : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    std::unique_ptr<WordNet> m_wn;

    Corpus build(uint64_t seed, bool hypernym = true, size_t concepts = 3000) const
    {
        CorpusOptions o;
        o.seed = seed;
        o.hypernymSentence = hypernym;
        o.concepts = concepts;
        return CorpusBuilder(*m_wn, o).build();
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        const fs::path dir = fs::path(m_tmp.path().toStdString()) / "wn";
        kvwb::test::writeWordNetFixture(dir);
        m_wn = std::make_unique<WordNet>(WordNet::load(dir));
    }

    void article_data()
    {
        QTest::addColumn<QString>("lemma");
        QTest::addColumn<QString>("article");
        QTest::newRow("consonant") << "car"
                                   << "a";
        QTest::newRow("vowel") << "apple"
                               << "an";
        QTest::newRow("silent h") << "hour"
                                  << "an";
        QTest::newRow("sounded h") << "house"
                                   << "a";
        QTest::newRow("yoo u") << "unit"
                               << "a";
        QTest::newRow("uh u") << "umbrella"
                              << "an";
        QTest::newRow("eu") << "eulogy"
                            << "a";
        QTest::newRow("one") << "one-way street"
                             << "a";
        QTest::newRow("acronym vowel sound") << "FBI agent"
                                             << "an";
        QTest::newRow("acronym consonant") << "CD"
                                           << "a";
        QTest::newRow("proper noun") << "Paris"
                                     << "";
        QTest::newRow("multiword") << "internal combustion engine"
                                   << "an";
    }
    void article()
    {
        QFETCH(QString, lemma);
        QFETCH(QString, article);
        QCOMPARE(QString::fromStdString(indefiniteArticle(lemma.toStdString())), article);
    }

    void renderQuestion_data()
    {
        QTest::addColumn<QString>("tmpl");
        QTest::addColumn<QString>("lemma");
        QTest::addColumn<QString>("question");
        QTest::newRow("a") << "what_is"
                           << "car"
                           << "What is a car?";
        QTest::newRow("an") << "what_is"
                            << "automobile"
                            << "What is an automobile?";
        QTest::newRow("whats") << "whats"
                               << "hour"
                               << "What's an hour?";
        QTest::newRow("proper") << "what_is"
                                << "Paris"
                                << "What is Paris?";
        QTest::newRow("explain") << "explain"
                                 << "car"
                                 << "Explain car.";
        QTest::newRow("quoted") << "what_does_mean"
                                << "motorcar"
                                << "What does 'motorcar' mean?";
        QTest::newRow("capital X") << "what_is_it"
                                   << "auto"
                                   << "Auto: what is it?";
        QTest::newRow("lowercase") << "lower_what_is"
                                   << "City of Light"
                                   << "what is city of light";
        QTest::newRow("lower define") << "lower_define"
                                      << "Paris"
                                      << "define paris";
        QTest::newRow("validation") << "could_you_tell"
                                    << "apple"
                                    << "Could you tell me what an apple is?";
    }
    void renderQuestion()
    {
        QFETCH(QString, tmpl);
        QFETCH(QString, lemma);
        QFETCH(QString, question);
        const QuestionTemplate *t = findTemplate(tmpl.toStdString());
        QVERIFY(t);
        QCOMPARE(QString::fromStdString(kvwb::core::renderQuestion(*t, lemma.toStdString())), question);
    }

    void templateTable()
    {
        int train = 0, valid = 0;
        QSet<QString> ids;
        for (const auto &t : questionTemplates()) {
            (t.validation ? valid : train)++;
            ids.insert(t.id);
        }
        QVERIFY(train >= 12);
        QCOMPARE(valid, 3);
        QCOMPARE(ids.size(), train + valid);
    }

    void answers()
    {
        const Synset *car = m_wn->find("n00002100");
        QCOMPARE(answerFor(*m_wn, *car, true),
                 std::string("A motor vehicle with four wheels; usually propelled by an "
                             "internal combustion engine. It is a kind of vehicle."));
        QCOMPARE(
            answerFor(*m_wn, *car, false),
            std::string(
                "A motor vehicle with four wheels; usually propelled by an internal combustion engine."));
        QCOMPARE(answerFor(*m_wn, *m_wn->find("n00005000"), true),
                 std::string("The capital and largest city of France. It is a national capital."));
        QCOMPARE(promptFor("What is a car?"), std::string("Q: What is a car?\nA:"));
        QCOMPARE(trainingText("What is a car?", "A vehicle."),
                 std::string("Q: What is a car?\nA: A vehicle.\n"));
    }

    void conceptSelection()
    {
        const auto concepts = selectConcepts(*m_wn, 100);
        QStringList ids;
        for (const auto &c : concepts)
            ids << QString::fromStdString(c.synset->id);
        // gadget (n00007000) has no definition: skipped. The railcar synset keeps only "railcar":
        // "car" belongs to its most popular sense.
        QVERIFY(!ids.contains("n00007000"));
        QCOMPARE(ids.first(), QString("n00002100"));
        QCOMPARE(ids.size(), 15);
        for (const auto &c : concepts) {
            QCOMPARE(c.rank, int(&c - &concepts[0]));
            if (c.synset->id == "n00002500")
                QCOMPARE(c.lemmas, std::vector<std::string>({"railcar"}));
        }
        QCOMPARE(selectConcepts(*m_wn, 3).size(), size_t(3));
    }

    void everySynonymAndTemplateForTopConcept()
    {
        const Corpus corpus = build(7);
        QSet<QString> lemmas, templates, questions;
        for (const auto &e : corpus.examples) {
            if (e.synset != "n00002100" || e.validation)
                continue;
            lemmas.insert(QString::fromStdString(e.lemma));
            templates.insert(QString::fromStdString(e.templateId));
            questions.insert(QString::fromStdString(e.question));
            QCOMPARE(e.answer, answerFor(*m_wn, *m_wn->find("n00002100"), true));
        }
        QCOMPARE(lemmas, QSet<QString>({"car", "auto", "automobile", "motorcar"}));
        // The most popular concept gets one example per training template at least.
        int trainTemplates = 0;
        for (const auto &t : questionTemplates())
            trainTemplates += t.validation ? 0 : 1;
        QCOMPARE(templates.size(), trainTemplates);
        for (const QString &q : questions)
            QVERIFY2(!q.contains("a automobile") && !q.contains("an car"), qPrintable(q));
        // No question is answered by two different synsets.
        QHash<QString, QString> owner;
        for (const auto &e : corpus.examples) {
            const QString q = QString::fromStdString(e.question);
            const QString s = QString::fromStdString(e.synset);
            QVERIFY2(!owner.contains(q) || owner[q] == s, qPrintable(q));
            owner[q] = s;
        }
    }

    void splitByTemplate()
    {
        const Corpus corpus = build(3);
        QCOMPARE(corpus.trainCount + corpus.validationCount, corpus.examples.size());
        QCOMPARE(corpus.validationCount, corpus.concepts * 3);
        QSet<QString> trainT, validT;
        for (size_t i = 0; i < corpus.examples.size(); ++i) {
            const auto &e = corpus.examples[i];
            QCOMPARE(e.validation, i >= corpus.trainCount); // train first, then validation
            QCOMPARE(findTemplate(e.templateId)->validation, e.validation);
            (e.validation ? validT : trainT).insert(QString::fromStdString(e.templateId));
        }
        QVERIFY(!trainT.isEmpty() && !validT.isEmpty());
        QVERIFY(!trainT.intersects(validT));
    }

    void examplesGrowWithPopularity()
    {
        CorpusOptions o;
        const CorpusBuilder b(*m_wn, o);
        QCOMPARE(b.examplesFor(125, 125), 13);
        QCOMPARE(b.examplesFor(0, 125), 4);
        int prev = 0;
        for (int64_t c : {0, 1, 3, 10, 30, 60, 125}) {
            QVERIFY(b.examplesFor(c, 125) >= prev);
            prev = b.examplesFor(c, 125);
        }
        const Corpus corpus = build(1);
        QHash<QString, int> perConcept;
        for (const auto &e : corpus.examples)
            if (!e.validation)
                perConcept[QString::fromStdString(e.synset)]++;
        QVERIFY(perConcept["n00002100"] > perConcept["n00003400"]); // car (125) > pear (3)
        QCOMPARE(perConcept["n00002400"], b.examplesFor(40, 125));  // boat: one lemma
        QCOMPARE(perConcept["n00002500"], b.examplesFor(7, 125));   // railcar: one owned lemma
    }

    void jsonlFormatAndReproducibility()
    {
        const std::string a = corpusToJsonl(build(42));
        const std::string b = corpusToJsonl(build(42));
        const std::string c = corpusToJsonl(build(43));
        QCOMPARE(a, b);
        QVERIFY(a != c);
        // Same number of examples, in another order and with other template/lemma pairings.
        QCOMPARE(std::count(a.begin(), a.end(), '\n'), std::count(c.begin(), c.end(), '\n'));
        const auto lines = QByteArray::fromStdString(a).split('\n');
        QJsonParseError err;
        const QJsonObject o = QJsonDocument::fromJson(lines.first(), &err).object();
        QCOMPARE(err.error, QJsonParseError::NoError);
        QCOMPARE(o.keys().size(), 9);
        const QString q = o["question"].toString(), ans = o["answer"].toString();
        QCOMPARE(o["prompt"].toString(), "Q: " + q + "\nA:");
        QCOMPARE(o["text"].toString(), "Q: " + q + "\nA: " + ans + "\n");
        QCOMPARE(o["split"].toString(), QString("train"));
        QVERIFY(ans.endsWith('.') && ans.at(0).isUpper());

        QTemporaryDir d;
        const fs::path out = fs::path(d.path().toStdString()) / "corpus.jsonl";
        writeCorpusJsonl(out, build(42));
        QFile f(QString::fromStdString(out.string()));
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll().toStdString(), a);
    }

    // Prompt files (capture --prompts, align, compare): a JSONL file under a .txt name is read as
    // literal text, with one warning naming the file and line; an endless file is refused before a
    // byte is read.
    void promptFiles()
    {
        QTemporaryDir tmp;
        const std::filesystem::path txt = std::filesystem::path(tmp.path().toStdString()) / "prompts.txt";
        kvwb::test::writeFile(txt, "a plain prompt\n{\"prompt\": \"what is a car?\"}\n{\"prompt\": \"b\"}\n");
        const auto c = kvwb::core::readTextCorpus(txt);
        QCOMPARE(c.documents.size(), size_t(3));
        QCOMPARE(c.documents[1].text, std::string("{\"prompt\": \"what is a car?\"}"));
        QCOMPARE(c.warnings.size(), size_t(1));
        QVERIFY2(QString::fromStdString(c.warnings[0])
                     .contains("prompts.txt:2: a JSON object in a plain-text file"),
                 c.warnings[0].c_str());
        QCOMPARE(c.skipped, size_t(0));
        try {
            (void)kvwb::core::readTextCorpus("/dev/urandom");
            QFAIL("read /dev/urandom");
        } catch (const kvwb::core::Error &e) {
            QVERIFY2(QString(e.what()).contains("/dev/urandom: not a regular file"), e.what());
        }
    }
};

QTEST_APPLESS_MAIN(TestCorpus)
#include "tst_corpus.moc"
