// The Knowledge step: a concept graph file opened or built (WordNet concepts, model B's modules),
// its nodes in a filterable table with reuse counts, module sizes and freshness, the graph around a
// node (its typed neighbours, followed by clicking), a question's path through it (recall's
// candidates, each one's verification, the chosen node's module, the profile line), the economics
// of the knowledge tier against no cache and a semantic cache on a workload (kvwb knowledge
// evaluate), and "Use in replays", which offers the graph to the Replay step's knowledge tier.
//
// Threading: GUI thread. The panel emits requests; the window runs them on the engine and hands
// the results back through the show* slots.
#pragma once

#include "ui/panels/job_types.h"

#include <QWidget>

class QLabel;
class QVBoxLayout;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTextBrowser;

namespace kvwb::ui {

class KnowledgePanel : public QWidget
{
    Q_OBJECT

public:
    explicit KnowledgePanel(QWidget *parent = nullptr);

    KnowledgeOpenRequest openRequest(bool build) const;
    KnowledgeTraceRequest traceRequest() const;
    KnowledgeEvalRequest evalRequest() const;
    void setGraphPath(const QString &path);
    void setProfilesPath(const QString &path);
    QString graphPathText() const; // the graph file typed or chosen (whether or not it is open)
    QString profilesPath() const;
    void setWorkloads(const QStringList &paths); // the project's workloads (the first is the default)

    QString graphPath() const;          // the graph shown ("" none)
    QString selectedNode() const;       // id of the node shown in detail ("" none)
    void selectNode(const QString &id); // shows it (and selects its row when it passes the filter)

public Q_SLOTS:
    void showGraph(const kvwb::ui::KnowledgeView &view);
    void showTrace(const kvwb::ui::KnowledgeTraceResult &trace);
    void showEconomics(const kvwb::ui::KnowledgeEconomics &economics);
    void setBusy(bool busy);
    void setModelBLoaded(bool loaded);
    void setFailed(const QString &message);
    void setProgress(const QString &stage); // the running job's stage line

Q_SIGNALS:
    void openRequested(const kvwb::ui::KnowledgeOpenRequest &request);
    void traceRequested(const kvwb::ui::KnowledgeTraceRequest &request);
    void evaluateRequested(const kvwb::ui::KnowledgeEvalRequest &request);
    // The graph (and profiles) the Replay step's knowledge tier should use ("" none).
    void useInReplays(const QString &graphPath, const QString &profilesPath);

private:
    void addGraphGroup(QVBoxLayout *layout);
    void addViews(QVBoxLayout *layout);
    void refreshTable();
    void refreshEnabled();
    void showNode(int index);

    QLineEdit *m_graph = nullptr;
    QLineEdit *m_profiles = nullptr;
    QLineEdit *m_workload = nullptr;
    QLineEdit *m_filter = nullptr;
    QLineEdit *m_question = nullptr;
    QLineEdit *m_user = nullptr;
    QSpinBox *m_concepts = nullptr;
    QSpinBox *m_limit = nullptr;
    QPushButton *m_open = nullptr;
    QPushButton *m_build = nullptr;
    QPushButton *m_use = nullptr;
    QPushButton *m_trace = nullptr;
    QPushButton *m_evaluate = nullptr;
    QLabel *m_status = nullptr;
    QLabel *m_economicsNote = nullptr;
    QTableWidget *m_nodes = nullptr;
    QTableWidget *m_economics = nullptr;
    QTextBrowser *m_detail = nullptr;
    QTextBrowser *m_path = nullptr;
    KnowledgeView m_view;
    bool m_hasView = false;
    bool m_busy = false;
    bool m_modelB = false;
    int m_shown = -1; // node index in detail
};

} // namespace kvwb::ui
