#include "core/workload/paraphrase_pairs.h"

#include "core/util/error.h"
#include "core/workload/corpus.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace kvwb::core {

std::vector<ParaphraseConcept> paraphraseConcepts(const WordNet &wordnet, size_t count, int holdOutEvery)
{
    if (holdOutEvery < 0 || holdOutEvery == 1)
        throw Error(ErrorCode::InvalidArgument, "hold-out-every must be 0 (none) or at least 2");
    const auto selected = selectConcepts(wordnet, count);
    std::unordered_map<std::string, size_t> indexOf;
    for (size_t i = 0; i < selected.size(); ++i)
        indexOf.emplace(selected[i].synset->id, i);
    std::vector<ParaphraseConcept> out;
    out.reserve(selected.size());
    for (const Concept &c : selected) {
        ParaphraseConcept p;
        p.synset = c.synset->id;
        p.rank = c.rank;
        p.lemmas = c.lemmas;
        p.heldOut = holdOutEvery > 0 && c.rank % holdOutEvery == holdOutEvery - 1;
        for (const Synset *s : wordnet.siblings(*c.synset))
            if (const auto it = indexOf.find(s->id); it != indexOf.end())
                p.siblings.push_back(it->second);
        out.push_back(std::move(p));
    }
    return out;
}

namespace {

std::vector<const QuestionTemplate *> templates(bool validation)
{
    std::vector<const QuestionTemplate *> out;
    for (const QuestionTemplate &t : questionTemplates())
        if (t.validation == validation)
            out.push_back(&t);
    return out;
}

template <typename T> const T &pick(const std::vector<T> &v, SeededRandom &rng)
{
    return v[rng.below(v.size())];
}

// A concept index other than `not`, held out or not as asked; the sibling list first when asked.
size_t otherConcept(const std::vector<ParaphraseConcept> &cs, size_t self, bool heldOut, bool preferSibling,
                    SeededRandom &rng)
{
    if (preferSibling) {
        std::vector<size_t> ok;
        for (size_t s : cs[self].siblings)
            if (cs[s].heldOut == heldOut && s != self)
                ok.push_back(s);
        if (!ok.empty())
            return pick(ok, rng);
    }
    for (int tries = 0; tries < 1000; ++tries) {
        const size_t c = rng.below(cs.size());
        if (c != self && cs[c].heldOut == heldOut)
            return c;
    }
    throw Error(ErrorCode::InvalidArgument, "paraphrase data: too few concepts to draw a negative from");
}

} // namespace

TrainingTriple sampleTriple(const std::vector<ParaphraseConcept> &concepts, SeededRandom &rng)
{
    const auto train = templates(false);
    size_t usable = 0;
    for (const auto &c : concepts)
        usable += c.heldOut ? 0 : 1;
    if (usable < 2)
        throw Error(ErrorCode::InvalidArgument, "paraphrase data: fewer than two training concepts");
    size_t c = 0;
    do
        c = rng.below(concepts.size());
    while (concepts[c].heldOut);
    const auto &cc = concepts[c];
    const QuestionTemplate *t1 = pick(train, rng);
    const std::string &l1 = pick(cc.lemmas, rng);
    const QuestionTemplate *t2 = t1;
    std::string l2 = l1;
    while (t2 == t1 && l2 == l1) { // another wording, another synonym, or both
        t2 = pick(train, rng);
        l2 = cc.lemmas.size() > 1 && rng.uniform() < 0.5 ? pick(cc.lemmas, rng) : l1;
    }
    const size_t n = otherConcept(concepts, c, false, rng.uniform() < 0.8, rng);
    return {renderQuestion(*t1, l1), renderQuestion(*t2, l2),
            renderQuestion(*t1, pick(concepts[n].lemmas, rng))};
}

std::vector<LabelledPair> heldOutPairs(const std::vector<ParaphraseConcept> &concepts, size_t count,
                                       uint64_t seed)
{
    SeededRandom rng(seed);
    const auto train = templates(false), valid = templates(true);
    std::vector<const QuestionTemplate *> all = train;
    all.insert(all.end(), valid.begin(), valid.end());
    std::vector<size_t> heldOut;
    for (size_t i = 0; i < concepts.size(); ++i)
        if (concepts[i].heldOut)
            heldOut.push_back(i);
    if (concepts.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "paraphrase data: fewer than two concepts");
    std::vector<LabelledPair> out;
    out.reserve(count);
    while (out.size() < count) {
        const double u = rng.uniform();
        LabelledPair p;
        if (u < 0.5) { // a duplicate: unseen wording of a training concept, or a held-out concept
            const bool unseenConcept = !heldOut.empty() && rng.uniform() < 0.5;
            const size_t c = unseenConcept ? pick(heldOut, rng) : rng.below(concepts.size());
            const auto &cc = concepts[c];
            const QuestionTemplate *t1 = unseenConcept ? pick(all, rng) : pick(valid, rng);
            const QuestionTemplate *t2 = pick(all, rng);
            const std::string &l1 = pick(cc.lemmas, rng);
            const std::string &l2 = rng.uniform() < 0.3 ? pick(cc.lemmas, rng) : l1;
            p = {renderQuestion(*t1, l1), renderQuestion(*t2, l2), true,
                 unseenConcept ? "held_out_concept" : (l1 != l2 ? "synonym" : "paraphrase")};
            if (p.a == p.b)
                continue; // the same text is the exact tier's, not a paraphrase
        } else {          // a near miss (sibling, same template) or another concept, in held-out wordings
            const size_t c = rng.below(concepts.size());
            const bool near = rng.uniform() < 0.6;
            const size_t n = otherConcept(concepts, c, concepts[c].heldOut, near, rng);
            const bool sibling = std::find(concepts[c].siblings.begin(), concepts[c].siblings.end(), n) !=
                                 concepts[c].siblings.end();
            const QuestionTemplate *t1 = pick(valid, rng);
            const QuestionTemplate *t2 = sibling ? t1 : pick(all, rng);
            p = {renderQuestion(*t1, pick(concepts[c].lemmas, rng)),
                 renderQuestion(*t2, pick(concepts[n].lemmas, rng)), false,
                 sibling ? "near_miss" : "other_concept"};
        }
        out.push_back(std::move(p));
    }
    return out;
}

namespace {

double aucOf(const std::vector<double> &pos, const std::vector<double> &neg)
{
    if (pos.empty() || neg.empty())
        return 0;
    std::vector<double> sortedNeg = neg;
    std::sort(sortedNeg.begin(), sortedNeg.end());
    double wins = 0;
    for (double p : pos) {
        const auto lo = std::lower_bound(sortedNeg.begin(), sortedNeg.end(), p);
        const auto hi = std::upper_bound(sortedNeg.begin(), sortedNeg.end(), p);
        wins += double(lo - sortedNeg.begin()) + 0.5 * double(hi - lo);
    }
    return wins / (double(pos.size()) * double(neg.size()));
}

} // namespace

PairSeparation separation(const std::vector<LabelledPair> &pairs, const std::vector<double> &scores)
{
    if (pairs.size() != scores.size())
        throw Error(ErrorCode::InvalidArgument, "separation: one similarity per pair");
    // a NaN similarity ranks below every number: it never passes a threshold (and cannot break the sort)
    std::vector<double> similarity = scores;
    for (double &x : similarity)
        if (std::isnan(x))
            x = -std::numeric_limits<double>::infinity();
    std::vector<double> pos, neg, near;
    for (size_t i = 0; i < pairs.size(); ++i) {
        (pairs[i].duplicate ? pos : neg).push_back(similarity[i]);
        if (pairs[i].kind == "near_miss")
            near.push_back(similarity[i]);
    }
    PairSeparation s;
    s.auc = aucOf(pos, neg);
    s.nearMissAuc = aucOf(pos, near);
    // thresholds at every similarity, highest first: the lowest one still at precision >= 0.9
    std::vector<size_t> order(pairs.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return similarity[a] > similarity[b]; });
    size_t tp = 0, fp = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        (pairs[order[k]].duplicate ? tp : fp) += 1;
        if (k + 1 < order.size() && similarity[order[k + 1]] == similarity[order[k]])
            continue; // a threshold passes every pair of equal similarity
        if (!pos.empty() && double(tp) >= 0.9 * double(tp + fp) &&
            double(tp) / double(pos.size()) > s.recallAtPrecision90) {
            s.recallAtPrecision90 = double(tp) / double(pos.size());
            s.thresholdAtPrecision90 = similarity[order[k]];
        }
    }
    return s;
}

} // namespace kvwb::core
