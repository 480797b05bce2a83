#include "ui/models/ledger_model.h"

#include <QBrush>
#include <QColor>

namespace kvwb::ui {

LedgerModel::LedgerModel(QObject *parent) : QAbstractTableModel(parent) {}

void LedgerModel::appendRows(const std::vector<core::LedgerRow> &rows)
{
    if (rows.empty())
        return;
    const int first = int(m_rows.size());
    beginInsertRows({}, first, first + int(rows.size()) - 1);
    m_rows.insert(m_rows.end(), rows.begin(), rows.end());
    endInsertRows();
}

void LedgerModel::setRows(std::vector<core::LedgerRow> rows)
{
    beginResetModel();
    m_rows = std::move(rows);
    endResetModel();
}

void LedgerModel::clear()
{
    setRows({});
}

std::optional<core::TierKind> LedgerModel::tierOfColumn(int column)
{
    switch (column) {
    case ExactColumn:
        return core::TierKind::Exact;
    case SemanticColumn:
        return core::TierKind::Semantic;
    case PrefixColumn:
        return core::TierKind::Prefix;
    case CrossColumn:
        return core::TierKind::Cross;
    case KnowledgeColumn:
        return core::TierKind::Knowledge;
    }
    return std::nullopt;
}

int LedgerModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(m_rows.size());
}

int LedgerModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

namespace {

QVariant displayValue(const core::LedgerRow &r, int column)
{
    switch (column) {
    case LedgerModel::RequestColumn:
        return qlonglong(r.requestId);
    case LedgerModel::TenantColumn:
        return QString::fromStdString(r.tenant);
    case LedgerModel::ModelColumn:
        return QString::fromUtf8(core::roleName(r.model));
    case LedgerModel::IntentColumn:
        return QString::fromStdString(r.intent);
    case LedgerModel::AnsweredByColumn:
        return QString::fromLatin1(r.answeredBy == core::TierKind::None ? "miss"
                                                                        : core::tierKindName(r.answeredBy));
    case LedgerModel::FalseHitColumn:
        return r.falseHit ? QStringLiteral("FALSE HIT") : QString();
    case LedgerModel::PromptTokensColumn:
        return r.promptTokens;
    case LedgerModel::ReusedColumn:
        return r.tokensReused;
    case LedgerModel::ComputedColumn:
        return r.tokensComputed;
    case LedgerModel::TtftColumn:
        return QString::number(r.ttftMs, 'f', 1);
    case LedgerModel::TotalColumn:
        return QString::number(r.totalMs, 'f', 1);
    case LedgerModel::GateColumn:
        if (r.gate == core::GateDecision::None)
            return QString();
        return QStringLiteral("%1 (%2)")
            .arg(QString::fromUtf8(core::enumName(core::kGateDecisionNames, r.gate)))
            .arg(r.gateValue, 0, 'g', 3);
    case LedgerModel::NodeColumn: {
        if (r.knowledgeNode.empty())
            return QString();
        QString s = QStringLiteral("%1 %2").arg(
            QString::fromStdString(r.knowledgeNode),
            QString::fromUtf8(core::enumName(core::kKnowledgeVerdictNames, r.knowledgeVerdict)));
        if (r.knowledgeModule != core::ModuleFate::None)
            s += QStringLiteral(", module %1")
                     .arg(QString::fromUtf8(core::enumName(core::kModuleFateNames, r.knowledgeModule)));
        if (r.profileApplied == 1)
            s += QStringLiteral(", profile");
        return s;
    }
    case LedgerModel::ShadowColumn:
        if (r.shadowKl < 0)
            return QString();
        return QStringLiteral("KL %1%2")
            .arg(r.shadowKl, 0, 'g', 3)
            .arg(r.shadowExact == 1   ? QStringLiteral(", same output")
                 : r.shadowExact == 0 ? QStringLiteral(", output differs")
                                      : QString());
    }
    if (const auto tier = LedgerModel::tierOfColumn(column)) {
        const auto it = r.tierHits.find(*tier);
        if (it == r.tierHits.end())
            return QString();
        return it->second ? QStringLiteral("hit") : QStringLiteral("miss");
    }
    return {};
}

QVariant sortValue(const core::LedgerRow &r, int column)
{
    switch (column) {
    case LedgerModel::AnsweredByColumn:
        return int(r.answeredBy);
    case LedgerModel::FalseHitColumn:
        return r.falseHit ? 1 : 0;
    case LedgerModel::TtftColumn:
        return r.ttftMs;
    case LedgerModel::TotalColumn:
        return r.totalMs;
    case LedgerModel::GateColumn:
        return r.gate == core::GateDecision::None ? -1.0 : r.gateValue;
    case LedgerModel::ShadowColumn:
        return r.shadowKl;
    }
    if (const auto tier = LedgerModel::tierOfColumn(column)) {
        const auto it = r.tierHits.find(*tier);
        return it == r.tierHits.end() ? -1 : int(it->second);
    }
    return displayValue(r, column);
}

bool isNumeric(int column)
{
    switch (column) {
    case LedgerModel::RequestColumn:
    case LedgerModel::PromptTokensColumn:
    case LedgerModel::ReusedColumn:
    case LedgerModel::ComputedColumn:
    case LedgerModel::TtftColumn:
    case LedgerModel::TotalColumn:
        return true;
    }
    return false;
}

} // namespace

QVariant LedgerModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const core::LedgerRow &r = m_rows[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        return displayValue(r, index.column());
    case SortRole:
        return sortValue(r, index.column());
    case Qt::TextAlignmentRole:
        if (isNumeric(index.column()))
            return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case Qt::ForegroundRole:
        // A false hit is the one outcome a user must not miss: a cached answer to another question.
        if (index.column() == FalseHitColumn && r.falseHit)
            return QBrush(QColor(0xc6, 0x28, 0x28));
        if (index.column() == GateColumn && r.gate == core::GateDecision::Fail)
            return QBrush(QColor(0xc6, 0x28, 0x28));
        if (index.column() == NodeColumn && r.knowledgeVerdict == core::KnowledgeVerdict::Rejected)
            return QBrush(QColor(0xc6, 0x28, 0x28));
        // Hits stand out from the many misses when scanning the tier columns.
        if (const auto tier = tierOfColumn(index.column())) {
            const auto it = r.tierHits.find(*tier);
            if (it != r.tierHits.end())
                return QBrush(it->second ? QColor(0x1b, 0x7a, 0x1b) : QColor(0x90, 0x90, 0x90));
        }
        if (index.column() == AnsweredByColumn && r.answeredBy == core::TierKind::None)
            return QBrush(QColor(0x90, 0x90, 0x90));
        return {};
    case Qt::ToolTipRole:
        if (index.column() == IntentColumn || index.column() == FalseHitColumn) {
            if (r.cachedRequestId >= 0)
                return tr("Answered from request %1 (intent \"%2\")")
                    .arg(r.cachedRequestId)
                    .arg(QString::fromStdString(r.cachedIntent));
        }
        if (index.column() == AnsweredByColumn && r.similarity >= 0)
            return tr("Best semantic similarity: %1").arg(r.similarity, 0, 'f', 3);
        return {};
    }
    return {};
}

QVariant LedgerModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return {};
    if (role == Qt::DisplayRole) {
        switch (section) {
        case RequestColumn:
            return tr("Request");
        case TenantColumn:
            return tr("Tenant");
        case ModelColumn:
            return tr("Model");
        case IntentColumn:
            return tr("Intent");
        case AnsweredByColumn:
            return tr("Answered by");
        case ExactColumn:
            return tr("Exact");
        case SemanticColumn:
            return tr("Semantic");
        case PrefixColumn:
            return tr("Prefix");
        case CrossColumn:
            return tr("Cross");
        case KnowledgeColumn:
            return tr("Knowledge");
        case FalseHitColumn:
            return tr("False hit");
        case PromptTokensColumn:
            return tr("Prompt tok");
        case ReusedColumn:
            return tr("Reused tok");
        case ComputedColumn:
            return tr("Computed tok");
        case TtftColumn:
            return tr("TTFT ms");
        case TotalColumn:
            return tr("Total ms");
        case GateColumn:
            return tr("Gate");
        case NodeColumn:
            return tr("Knowledge node");
        case ShadowColumn:
            return tr("Shadow check");
        }
        return {};
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case ExactColumn:
        case SemanticColumn:
        case PrefixColumn:
        case CrossColumn:
        case KnowledgeColumn:
            return tr("Whether this tier had an entry for the request (empty: tier not in the stack)");
        case FalseHitColumn:
            return tr("A cached response, or a knowledge node, of a different intent than the request's");
        case ReusedColumn:
            return tr("Prompt tokens taken from a cache instead of being computed");
        case ComputedColumn:
            return tr("Prompt tokens prefilled plus generated tokens");
        case TtftColumn:
            return tr("Time to first token: cache lookup plus model work, measured");
        case GateColumn:
            return tr("Cross-model quality gate decision and the value it compared");
        case NodeColumn:
            return tr(
                "Knowledge tier: the concept node recall proposed, whether graph verification accepted or "
                "rejected it, whether its KV module was reused or recomputed, and whether the user's "
                "profile was rendered");
        case ShadowColumn:
            return tr("Sampled hits re-run from scratch: KL divergence to the from-scratch output");
        }
    }
    return {};
}

} // namespace kvwb::ui
