#include "ui/models/ledger_filter_model.h"

#include "ui/models/ledger_model.h"

#include <algorithm>

namespace kvwb::ui {

namespace {

char foldAscii(char c)
{
    return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
}

// needle in haystack, ASCII letters of either case: 100k rows of questions and answers are searched
// on each keystroke, with no conversion to QString.
bool containsFolded(const std::string &haystack, const std::string &needle)
{
    return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                       [](char a, char b) { return foldAscii(a) == foldAscii(b); }) != haystack.end();
}

} // namespace

LedgerFilterModel::LedgerFilterModel(QObject *parent) : QSortFilterProxyModel(parent)
{
    setSortRole(LedgerModel::SortRole);
    // Rows streamed in while a filter is active are filtered (and sorted) as they arrive.
    setDynamicSortFilter(true);
}

void LedgerFilterModel::setLedgerModel(LedgerModel *model)
{
    m_ledger = model;
    setSourceModel(model);
}

void LedgerFilterModel::setAnsweredBy(std::optional<core::TierKind> tier)
{
    if (m_answeredBy == tier)
        return;
    m_answeredBy = tier;
    invalidateRowsFilter();
}

void LedgerFilterModel::setTenant(const QString &tenant)
{
    if (m_tenant == tenant)
        return;
    m_tenant = tenant;
    m_tenantUtf8 = tenant.toStdString();
    invalidateRowsFilter();
}

void LedgerFilterModel::setModelName(const QString &model)
{
    if (m_model == model)
        return;
    m_model = model;
    m_modelUtf8 = model.toStdString();
    invalidateRowsFilter();
}

void LedgerFilterModel::setFalseHitsOnly(bool on)
{
    if (m_falseHitsOnly == on)
        return;
    m_falseHitsOnly = on;
    invalidateRowsFilter();
}

void LedgerFilterModel::setSearchText(const QString &text)
{
    if (m_text == text)
        return;
    m_text = text;
    m_textUtf8 = text.toStdString();
    invalidateRowsFilter();
}

bool LedgerFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex &sourceParent) const
{
    if (!m_ledger || sourceParent.isValid())
        return false;
    const core::LedgerRow &r = m_ledger->row(sourceRow);
    if (m_answeredBy && r.answeredBy != *m_answeredBy)
        return false;
    if (m_falseHitsOnly && !r.falseHit)
        return false;
    if (!m_tenantUtf8.empty() && r.tenant != m_tenantUtf8)
        return false;
    if (!m_modelUtf8.empty() && core::roleName(r.model) != m_modelUtf8)
        return false;
    if (!m_textUtf8.empty() && !containsFolded(r.tenant, m_textUtf8) &&
        !containsFolded(r.intent, m_textUtf8) && !containsFolded(r.question, m_textUtf8) &&
        !containsFolded(r.answer, m_textUtf8))
        return false;
    return true;
}

} // namespace kvwb::ui
