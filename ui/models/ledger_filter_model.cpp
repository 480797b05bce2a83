#include "ui/models/ledger_filter_model.h"

#include "ui/models/ledger_model.h"

namespace kvwb::ui {

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
    if (!m_text.isEmpty()) {
        const auto contains = [&](const std::string &s) {
            return QString::fromStdString(s).contains(m_text, Qt::CaseInsensitive);
        };
        if (!contains(r.tenant) && !contains(r.intent))
            return false;
    }
    return true;
}

} // namespace kvwb::ui
