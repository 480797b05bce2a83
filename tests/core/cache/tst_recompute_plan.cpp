// Selective recompute's position choice: round(share * n) positions, first / recent / both ends,
// ascending; shares outside [0, 1] clamp and NaN recomputes nothing.
#include "core/cache/recompute_plan.h"

#include <QtTest>

#include <cmath>
#include <limits>

using namespace kvwb::core;

class TestRecomputePlan : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void positions()
    {
        using V = std::vector<int>;
        QCOMPARE(recomputedPositions(10, {0.25, RecomputePositions::First}), V({0, 1, 2})); // 2.5 -> 3
        QCOMPARE(recomputedPositions(10, {0.25, RecomputePositions::Recent}), V({7, 8, 9}));
        QCOMPARE(recomputedPositions(10, {0.25, RecomputePositions::Ends}), V({0, 1, 9}));
        QCOMPARE(recomputedPositions(10, {0.4, RecomputePositions::Ends}), V({0, 1, 8, 9}));
        QCOMPARE(recomputedPositions(10, {0.0, RecomputePositions::Ends}), V());
        QCOMPARE(recomputedPositions(4, {1.0, RecomputePositions::Ends}), V({0, 1, 2, 3}));
        QCOMPARE(recomputedPositions(4, {7.0, RecomputePositions::Recent}), V({0, 1, 2, 3}));
        QCOMPARE(recomputedPositions(4, {-1.0, RecomputePositions::First}), V());
        QCOMPARE(
            recomputedPositions(4, {std::numeric_limits<double>::quiet_NaN(), RecomputePositions::First}),
            V());
        QCOMPARE(recomputedPositions(0, {1.0, RecomputePositions::Ends}), V());
        QCOMPARE(recomputedPositions(-3, {1.0, RecomputePositions::Ends}), V());
    }

    void names()
    {
        for (auto p : {RecomputePositions::Ends, RecomputePositions::First, RecomputePositions::Recent})
            QCOMPARE(parseRecomputePositions(recomputePositionsName(p)), std::optional(p));
        QVERIFY(!parseRecomputePositions("middle"));
    }
};

QTEST_GUILESS_MAIN(TestRecomputePlan)
#include "tst_recompute_plan.moc"
