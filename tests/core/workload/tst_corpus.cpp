// Q/A corpus: question rendering (a/an, synonyms), answers, concept selection with lemma
// ownership, the split by template, the examples-per-concept rule and seeded reproducibility.
#include "core/util/error.h"
#include "core/workload/context_prompts.h"
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

    // `kvwb corpus context`: every prompt states its answer before asking for it (counterfactual
    // facts: an answer that is not the asked concept's own), the counts asked for, one stream per
    // kind, seeded, and the file read back with its answers.
    void contextPrompts()
    {
        ContextPromptOptions o;
        o.perKind = 40;
        o.entities = 3;
        o.distance = 2;
        const auto prompts = buildContextPrompts(o, m_wn.get());
        QCOMPARE(prompts.size(), size_t(120));
        std::map<std::string, std::string> answerOf; // the fixture's concepts' own answers
        for (const auto &c : selectConcepts(*m_wn, o.concepts))
            for (const auto &l : c.lemmas)
                answerOf[l] = c.answer;
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto &p = prompts[i];
            QCOMPARE(int(p.kind), int(o.kinds[i / 40]));
            QVERIFY(!p.answer.empty() && p.asked >= 0 && p.asked < 3);
            const auto count = [&](const std::string &what) {
                size_t n = 0;
                for (size_t at = p.prompt.find(what); at != std::string::npos;
                     at = p.prompt.find(what, at + 1))
                    ++n;
                return n;
            };
            switch (p.kind) {
            case ContextKind::Names: // "X has a pet called N." each, 2 filler sentences, the question
                QCOMPARE(count(" called " + p.answer + "."), size_t(1));
                QCOMPARE(count(" has a "), size_t(3));
                QCOMPARE(count("."), size_t(5));
                QVERIFY(p.prompt.size() > 9 && p.prompt.substr(p.prompt.size() - 9) == "is called");
                break;
            case ContextKind::Numbers:
                QCOMPARE(count("'s room number is " + p.answer + "."), size_t(1));
                QCOMPARE(count("'s room number is"), size_t(4));
                QVERIFY(p.answer.size() == 3 || p.answer.size() == 4);
                break;
            case ContextKind::Facts: { // 5 answered turns, then the question
                QCOMPARE(count("\nA: "), size_t(5));
                QCOMPARE(count("A: " + p.answer + "\n"), size_t(1));
                QVERIFY(p.prompt.size() > 3 && p.prompt.substr(p.prompt.size() - 3) == "\nA:");
                break;
            }
            }
        }
        // seeded; one kind's prompts do not depend on the kinds beside it
        const auto again = buildContextPrompts(o, m_wn.get());
        QCOMPARE(contextPromptsToJsonl(again), contextPromptsToJsonl(prompts));
        ContextPromptOptions numbersOnly = o;
        numbersOnly.kinds = {ContextKind::Numbers};
        const auto numbers = buildContextPrompts(numbersOnly, nullptr); // no WordNet needed
        QCOMPARE(numbers.size(), size_t(40));
        QCOMPARE(numbers[7].prompt, prompts[47].prompt);
        ContextPromptOptions otherSeed = o;
        otherSeed.seed = 2;
        QVERIFY(contextPromptsToJsonl(buildContextPrompts(otherSeed, m_wn.get())) !=
                contextPromptsToJsonl(prompts));

        // counterfactual facts: the stated answer is another concept's
        ContextPromptOptions cf = o;
        cf.kinds = {ContextKind::Facts};
        cf.counterfactual = true;
        cf.distance = 0;
        int notItsOwn = 0;
        for (const auto &p : buildContextPrompts(cf, m_wn.get())) {
            QVERIFY(p.prompt.find("A: " + p.answer + "\n") != std::string::npos);
            const size_t q = p.prompt.rfind("\nQ: ");
            const std::string question = p.prompt.substr(q);
            bool own = false;
            for (const auto &[lemma, answer] : answerOf)
                if (question.find(lemma) != std::string::npos && answer == p.answer)
                    own = true;
            notItsOwn += own ? 0 : 1;
        }
        QCOMPARE(notItsOwn, 40);

        // the file as compare reads it: the prompt, its answer, the validation split
        QTemporaryDir tmp;
        const fs::path file = fs::path(tmp.path().toStdString()) / "context.jsonl";
        kvwb::test::writeFile(file, contextPromptsToJsonl(prompts));
        const auto back = readTextCorpus(file);
        QCOMPARE(back.documents.size(), prompts.size());
        QCOMPARE(back.documents[5].prompt, prompts[5].prompt);
        QCOMPARE(back.documents[5].answer, prompts[5].answer);
        QVERIFY(back.documents[5].validation);
        QCOMPARE(back.documents[5].text, prompts[5].prompt + " " + prompts[5].answer);

        // bad options, one clear line each
        const auto refused = [&](ContextPromptOptions bad, const WordNet *wn, const char *message) {
            try {
                (void)buildContextPrompts(bad, wn);
            } catch (const Error &e) {
                return QString(e.what()).contains(message);
            }
            return false;
        };
        ContextPromptOptions bad = o;
        bad.entities = 9;
        QVERIFY(refused(bad, m_wn.get(), "entities: 9 is not in 2..8"));
        bad = o;
        bad.distance = 17;
        QVERIFY(refused(bad, m_wn.get(), "distance: 17 is not in 0..16"));
        QVERIFY(refused(o, nullptr, "facts need WordNet"));
        bad = cf;
        bad.entities = 8;
        bad.distance = 16; // 32 concepts; the fixture has 15
        QVERIFY(refused(bad, m_wn.get(), "15 usable concepts, a facts prompt needs 32"));
        QCOMPARE(int(parseContextKind("numbers")), int(ContextKind::Numbers));
        QVERIFY_THROWS_EXCEPTION(Error, parseContextKind("dates"));
    }
};

QTEST_APPLESS_MAIN(TestCorpus)
#include "tst_corpus.moc"
