// MainWindow's Report step: its page, and writing the report (HTML, PDF, Markdown, CSV and JSON)
// of what the steps hold.
#include "ui/window/main_window.h"

#include "core/util/error.h"
#include "ui/models/model_card_model.h"
#include "ui/panels/alignment_panel.h"
#include "ui/panels/capture_panel.h"
#include "ui/panels/compare_panel.h"
#include "ui/panels/knowledge_panel.h"
#include "ui/panels/replay_panel.h"

#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDateTime>
#include <QDesktopServices>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTableView>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <fstream>

#include <unistd.h>

namespace kvwb::ui {

QWidget *MainWindow::buildReportPage()
{
    auto *page = new QWidget(this);
    auto *v = new QVBoxLayout(page);
    auto *intro =
        new QLabel(tr("<h3>Report</h3><p>The shown experiment as one report: HTML (charts embedded), "
                      "PDF, Markdown, and its tables as CSV and JSON, with the settings and the "
                      "configuration's sha256. The folder is created if it does not exist.</p>"),
                   page);
    intro->setWordWrap(true);
    v->addWidget(intro);
    auto *row = new QHBoxLayout;
    row->addWidget(new QLabel(tr("Folder:"), page));
    m_reportFolder = new QLineEdit(page);
    m_reportFolder->setObjectName("reportFolder");
    row->addWidget(m_reportFolder, 1);
    auto *browse = new QPushButton(tr("Browse..."), page);
    browse->setObjectName("reportBrowse");
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir =
            QFileDialog::getExistingDirectory(this, tr("Export the report into"), m_reportFolder->text());
        if (!dir.isEmpty())
            m_reportFolder->setText(dir);
    });
    row->addWidget(browse);
    row->addWidget(new QLabel(tr("PDF paper:"), page));
    m_reportPaper = new QComboBox(page);
    m_reportPaper->setObjectName("reportPaper");
    m_reportPaper->addItem(tr("A4"), int(PaperSize::A4));
    m_reportPaper->addItem(tr("Letter"), int(PaperSize::Letter));
    m_reportPaper->setToolTip(tr("The PDF's pages: A4 or US Letter, 15 mm margins (kvwb report --paper)."));
    row->addWidget(m_reportPaper);
    v->addLayout(row);
    auto *buttons = new QHBoxLayout;
    m_exportButton = new QPushButton(tr("Export report"), page);
    m_exportButton->setObjectName("exportReportButton");
    m_exportButton->setEnabled(false);
    connect(m_exportButton, &QPushButton::clicked, this, [this] { exportReport(m_reportFolder->text()); });
    buttons->addWidget(m_exportButton);
    m_openReportButton = new QPushButton(tr("Open report"), page);
    m_openReportButton->setObjectName("openReportButton");
    m_openReportButton->setEnabled(false);
    connect(m_openReportButton, &QPushButton::clicked, this, [this] { openReport(); });
    buttons->addWidget(m_openReportButton);
    buttons->addStretch(1);
    v->addLayout(buttons);
    m_reportStatus = new QLabel(tr("Open or capture an experiment first."), page);
    m_reportStatus->setObjectName("reportStatus");
    m_reportStatus->setWordWrap(true);
    m_reportStatus->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(m_reportStatus);
    v->addStretch(1);
    return page;
}

bool MainWindow::exportReport(const QString &outDir)
{
    if (m_experimentPath.isEmpty() || m_engineBusy)
        return false;
    if (outDir.trimmed().isEmpty()) {
        showError(tr("Choose a folder for the report first."));
        return false;
    }
    if (!QDir().mkpath(outDir)) { // the folder is created, parents included
        showError(tr("cannot create the report folder %1").arg(outDir));
        m_reportStatus->setText(tr("Cannot create the folder %1.").arg(outDir));
        return false;
    }
    m_reportDir = outDir;
    m_reportStatus->setText(tr("Writing the report into %1 ...").arg(outDir));
    beginJob(Job::Report);
    log(tr("exporting the report of %1 into %2").arg(m_experimentPath, outDir));
    Q_EMIT reportRequested(m_experimentPath);
    return true;
}

bool MainWindow::openReport()
{
    QString why;
    if (m_lastReport.isEmpty())
        why = tr("No report was exported yet.");
    else if (!QFileInfo::exists(m_lastReport))
        why = tr("%1 is gone: export the report again.").arg(m_lastReport);
    else if (!QDesktopServices::openUrl(QUrl::fromLocalFile(m_lastReport)))
        why = tr("Nothing on this desktop opens %1: open it in a browser.").arg(m_lastReport);
    if (why.isEmpty()) {
        m_reportStatus->setText(m_reportWritten); // an earlier failure's reason no longer holds
        return true;
    }
    m_reportStatus->setText(why.toHtmlEscaped());
    log(why);
    return false;
}

QStringList MainWindow::writeReport(std::shared_ptr<const ReportData> data)
{
    QStringList files;
    if (m_reportDir.isEmpty() || !data)
        return files;
    ReportData copy = *data; // the writers add their warnings
    copy.paper = PaperSize(m_reportPaper->currentData().toInt());
    try {
        const std::filesystem::path dir = m_reportDir.toStdString();
        for (auto writer : {&writeHtml, &writePdf, &writeMarkdown, &writeCsvJson})
            for (const auto &f : writer(copy, dir))
                files << QString::fromStdString(f.string());
        for (const auto &w : copy.warnings)
            log(tr("report: %1").arg(QString::fromStdString(w)));
        log(tr("report written: %1 files in %2 (configuration sha256 %3)")
                .arg(files.size())
                .arg(m_reportDir, QString::fromStdString(copy.configSha256).left(16)));
        statusBar()->showMessage(tr("Report written to %1").arg(m_reportDir), 10000);
        m_lastReport.clear();
        for (const QString &f : files)
            if (f.endsWith(".html") && m_lastReport.isEmpty())
                m_lastReport = f;
        m_openReportButton->setEnabled(!m_lastReport.isEmpty());
        QStringList names;
        for (const QString &f : files)
            names << QFileInfo(f).fileName();
        m_reportWritten = tr("Written to %1: %2. <i>Open report</i> shows it in the browser.")
                              .arg(m_reportDir.toHtmlEscaped(), names.join(", ").toHtmlEscaped());
        m_reportStatus->setText(m_reportWritten);
        markStep("report", true);
    } catch (const core::Error &e) {
        showError(tr("cannot write the report: %1").arg(QString::fromUtf8(e.what())));
        m_reportStatus->setText(tr("The report could not be written: %1").arg(QString::fromUtf8(e.what())));
    }
    m_reportDir.clear();
    Q_EMIT reportWritten(files);
    return files;
}

} // namespace kvwb::ui
