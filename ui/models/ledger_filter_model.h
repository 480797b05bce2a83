// Filters a LedgerModel for the Replay panel's ledger table: by the tier that answered, tenant,
// model, false hits only, and a free-text search over tenant, intent, question and answer. Every filter is
// off by default; they combine with AND. Sorts on LedgerModel::SortRole so numbers sort as numbers.
//
// GUI-thread only (a QSortFilterProxyModel). The source must be a LedgerModel (setLedgerModel);
// it is not owned.
#pragma once

#include "core/ledger/replay_ledger.h"

#include <QSortFilterProxyModel>

#include <optional>

namespace kvwb::ui {

class LedgerModel;

class LedgerFilterModel : public QSortFilterProxyModel
{
    Q_OBJECT

public:
    explicit LedgerFilterModel(QObject *parent = nullptr);

    void setLedgerModel(LedgerModel *model);

    // std::nullopt: any; TierKind::None: misses only.
    void setAnsweredBy(std::optional<core::TierKind> tier);
    void setTenant(const QString &tenant);   // exact match; empty: any
    void setModelName(const QString &model); // "a" | "b"; empty: any
    void setFalseHitsOnly(bool on);
    // a substring of the tenant, the intent, the question or the answer; ASCII letters match either
    // case, other characters exactly
    void setSearchText(const QString &text);

    std::optional<core::TierKind> answeredBy() const { return m_answeredBy; }
    QString tenant() const { return m_tenant; }
    QString modelName() const { return m_model; }
    bool falseHitsOnly() const { return m_falseHitsOnly; }
    QString searchText() const { return m_text; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex &sourceParent) const override;

private:
    LedgerModel *m_ledger = nullptr;
    std::optional<core::TierKind> m_answeredBy;
    QString m_tenant;
    QString m_model;
    bool m_falseHitsOnly = false;
    QString m_text;
    // UTF-8 copies of the string filters, compared against the rows' std::strings without
    // converting every row to QString (100k rows are filtered on each keystroke).
    std::string m_tenantUtf8;
    std::string m_modelUtf8;
    std::string m_textUtf8; // the search text, matched with ASCII case folding
};

} // namespace kvwb::ui
