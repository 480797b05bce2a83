#include "ui/models/ledger_model.h"

#include <QBrush>
#include <QColor>

namespace kvwb::ui {

LedgerModel::LedgerModel(QObject *parent) : QAbstractTableModel(parent) {}

void LedgerModel::appendRows(const std::vector<core::LedgerRow> &rows)
{
    if (rows.empty())
        return;
    m_rowOfRequest.clear();
    const int first = int(m_rows.size());
    beginInsertRows({}, first, first + int(rows.size()) - 1);
    m_rows.insert(m_rows.end(), rows.begin(), rows.end());
    endInsertRows();
}

void LedgerModel::setRows(std::vector<core::LedgerRow> rows)
{
    beginResetModel();
    m_rows = std::move(rows);
    m_rowOfRequest.clear();
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

// A question or an answer on one table line: line breaks shown as spaces, at most 300 characters
// (the view elides what its column cannot show; the tooltip and the detail pane hold the whole).
QString oneLine(const std::string &text)
{
    QString s = QString::fromStdString(text.substr(0, 1200)).simplified();
    if (s.size() > 300)
        s = s.left(299) + QChar(0x2026);
    return s;
}

// The whole text for a tooltip: rich text, so Qt wraps it inside the screen instead of drawing one
// line as wide as the text.
QString wrappedTip(const std::string &text)
{
    if (text.empty())
        return {};
    QString s = QString::fromStdString(text);
    if (s.size() > 600)
        s = s.left(599) + QChar(0x2026);
    return QStringLiteral("<p style='white-space:pre-wrap'>%1</p>").arg(s.toHtmlEscaped());
}

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
    case LedgerModel::QuestionColumn:
        return oneLine(r.question);
    case LedgerModel::AnswerColumn:
        return oneLine(r.answer);
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
        if (index.column() == QuestionColumn)
            return wrappedTip(r.question);
        if (index.column() == AnswerColumn)
            return wrappedTip(r.answer);
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
        case QuestionColumn:
            return tr("Question");
        case AnsweredByColumn:
            return tr("Answered by");
        case AnswerColumn:
            return tr("Answer");
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
        case QuestionColumn:
            return tr("The request's question (the end of its prompt when the workload has no question)");
        case AnswerColumn:
            return tr("The answer the request got: for an exact or semantic hit, the cached answer served");
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

int LedgerModel::rowOfRequest(int64_t requestId) const
{
    if (m_rowOfRequest.empty() && !m_rows.empty())
        for (size_t i = m_rows.size(); i-- > 0;) // the first row of an id wins
            m_rowOfRequest[m_rows[i].requestId] = int(i);
    const auto it = m_rowOfRequest.find(requestId);
    return it == m_rowOfRequest.end() ? -1 : it->second;
}

bool LedgerModel::shownByDefault(int column)
{
    switch (column) {
    case RequestColumn:
    case TenantColumn:
    case ModelColumn:
    case IntentColumn:
    case QuestionColumn:
    case AnsweredByColumn:
    case AnswerColumn:
    case FalseHitColumn:
    case PromptTokensColumn:
    case ReusedColumn:
    case TtftColumn:
        return true;
    }
    return false;
}

namespace {

QString para(const std::string &text)
{
    return QStringLiteral("<p style='white-space:pre-wrap; margin-left:12px'>%1</p>")
        .arg(QString::fromStdString(text).toHtmlEscaped());
}

} // namespace

QString LedgerModel::detailHtml(int index) const
{
    if (index < 0 || index >= rowCount())
        return {};
    const core::LedgerRow &r = m_rows[size_t(index)];
    const auto name = [](const auto &names, auto value) {
        return QString::fromUtf8(core::enumName(names, value));
    };
    QString h = tr("<h3>Request %1</h3><p>tenant <b>%2</b>, model %3, intent <b>%4</b>, arrived at %5 ms</p>")
                    .arg(r.requestId)
                    .arg(QString::fromStdString(r.tenant).toHtmlEscaped())
                    .arg(QString::fromUtf8(core::roleName(r.model)))
                    .arg(r.intent.empty() ? tr("unknown") : QString::fromStdString(r.intent).toHtmlEscaped())
                    .arg(r.arrivalMs);
    h += tr("<p><b>Question</b></p>") +
         (r.question.empty() ? tr("<p>(not in this ledger: written before questions were kept)</p>")
                             : para(r.question));
    if (r.notServed != core::NotServed::No) {
        h += tr("<p><b>Not served</b>: %1.</p>")
                 .arg(r.notServed == core::NotServed::Context
                          ? tr("the prompt does not fit the model's context")
                          : tr("its worker died"));
        return h;
    }
    const QString by = r.answeredBy == core::TierKind::None
                           ? tr("the model (every tier missed)")
                           : QString::fromLatin1(core::tierKindName(r.answeredBy));
    h += tr("<p><b>Answer</b>, from %1%2</p>")
             .arg(by)
             .arg(r.falseHit ? tr(" - <span style='color:#c62828'><b>a false hit</b></span>") : QString());
    h += r.answer.empty() ? tr("<p>(not in this ledger)</p>") : para(r.answer);
    if (r.cachedRequestId >= 0) {
        h += tr("<p>Served from request %1 (intent %2)")
                 .arg(r.cachedRequestId)
                 .arg(r.cachedIntent.empty() ? tr("unknown")
                                             : QString::fromStdString(r.cachedIntent).toHtmlEscaped());
        const int from = rowOfRequest(r.cachedRequestId);
        if (from >= 0 && !m_rows[size_t(from)].question.empty())
            h += tr(", which asked:</p>") + para(m_rows[size_t(from)].question);
        else
            h += QStringLiteral("</p>");
    } else if (!r.cachedIntent.empty()) {
        h += tr("<p>Reused the cache of intent %1</p>")
                 .arg(QString::fromStdString(r.cachedIntent).toHtmlEscaped());
    }
    QString tiers;
    for (const auto &[tier, hit] : r.tierHits)
        tiers += QStringLiteral("%1%2 %3").arg(tiers.isEmpty() ? QString() : QStringLiteral(", "),
                                               QString::fromLatin1(core::tierKindName(tier)),
                                               hit ? tr("hit") : tr("miss"));
    QString rows;
    const auto add = [&](const QString &k, const QString &v) {
        if (!v.isEmpty())
            rows += QStringLiteral("<tr><td>%1</td><td>%2</td></tr>").arg(k, v);
    };
    add(tr("tiers"), tiers.isEmpty() ? tr("none consulted") : tiers);
    if (r.similarity >= 0)
        add(tr("best similarity"), QString::number(r.similarity, 'f', 3));
    if (r.semanticDecision != core::SemanticDecision::None)
        add(tr("error bound"), name(core::kSemanticDecisionNames, r.semanticDecision));
    if (r.semanticGuard != core::SemanticGuard::None)
        add(tr("guard"), tr("%1 held back a candidate above the threshold (%2)")
                             .arg(name(core::kSemanticGuardNames, r.semanticGuard))
                             .arg(r.guardedSameIntent == 1   ? tr("a hit lost: same intent")
                                  : r.guardedSameIntent == 0 ? tr("a false hit prevented")
                                                             : tr("intent unknown")));
    if (r.verifier != core::VerifierVerdict::None)
        add(tr("verifier"),
            tr("%1%2, %3 ms%4")
                .arg(r.semanticGuard != core::SemanticGuard::None && r.verifier == core::VerifierVerdict::Pass
                         ? tr("pass, overruling the guard")
                         : name(core::kVerifierVerdictNames, r.verifier))
                .arg(r.verifierScore >= 0 ? tr(" at score %1").arg(r.verifierScore, 0, 'f', 3) : QString())
                .arg(r.verifierMs, 0, 'f', 2)
                .arg(r.verifier == core::VerifierVerdict::Pass ? QString()
                     : r.verifiedSameIntent == 1               ? tr(" (a hit lost: same intent)")
                     : r.verifiedSameIntent == 0               ? tr(" (a false hit prevented)")
                                                               : QString()));
    if (r.gate != core::GateDecision::None)
        add(tr("quality gate"), QStringLiteral("%1 (%2)")
                                    .arg(name(core::kGateDecisionNames, r.gate))
                                    .arg(r.gateValue, 0, 'g', 4));
    if (!r.knowledgeNode.empty())
        add(tr("knowledge"), displayValue(r, NodeColumn).toString().toHtmlEscaped());
    if (r.shadowKl >= 0)
        add(tr("shadow check"), displayValue(r, ShadowColumn).toString());
    if (r.store != core::StoreNote::None)
        add(tr("shared store"), name(core::kStoreNoteNames, r.store));
    if (r.worker >= 0)
        add(tr("worker"), tr("%1 (%2)").arg(r.worker).arg(QString::fromStdString(r.route).toHtmlEscaped()));
    add(tr("tokens"), tr("prompt %1, reused %2, computed %3, generated %4")
                          .arg(r.promptTokens)
                          .arg(r.tokensReused)
                          .arg(r.tokensComputed)
                          .arg(r.generatedTokens));
    add(tr("time"), tr("TTFT %1 ms, total %2 ms, of which lookup %3 ms")
                        .arg(r.ttftMs, 0, 'f', 2)
                        .arg(r.totalMs, 0, 'f', 2)
                        .arg(r.lookupMs, 0, 'f', 2));
    return h + QStringLiteral("<table cellspacing=4>%1</table>").arg(rows);
}

} // namespace kvwb::ui
