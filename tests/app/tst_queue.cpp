// The job queue (train/job_queue.h) and `zerostudio queue`: jobs added from the CLI run in order,
// each started exactly once, even with two runners at once; a job killed with kill -9 (runner and
// trainer, as when the machine goes down) resumes from its newest checkpoint at the next run; a
// failing job does not stop the queue unless --stop-on-failure; Stop ends a job with a checkpoint.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "config/problem.h"
#include "core/error.h"
#include "core/file_lock.h"
#include "io/atomic_file.h"
#include "queue_runner.h"
#include "train/job_queue.h"
#include "test_support.h"

using zs::train::JobQueue;
using zs::train::JobState;

namespace {

/// A tiny job: 64 generated images, batch 4, a checkpoint every 3 steps (about a second a job).
QStringList tinyJob(int steps) {
  return {"--set", "data.generate_count=64", "--set", "training.batch_size=4", "--set",
          "training.max_steps=" + QString::number(steps), "--set", "sampling.every_n_steps=0", "--set",
          "checkpointing.every_n_steps=3", "--set", "logging.every_n_steps=2", "--set", "scheduler.warmup_steps=0"};
}

std::vector<std::string> tinyOverrides(int steps) {
  std::vector<std::string> out;
  const QStringList l = tinyJob(steps);
  for (int i = 1; i < l.size(); i += 2) out.push_back(l[i].toStdString());
  return out;
}

/// Events of one type in a run folder's events.jsonl.
std::vector<nlohmann::json> events(const std::string& runDir, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream in(runDir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("type", "") == type) out.push_back(e);
  }
  return out;
}

/// A `zerostudio` process with its queue in `home` (XDG_CONFIG_HOME) and `cwd` as its folder.
class Cli {
 public:
  Cli(QString home, QString cwd, zs::test::FailureReport& report) : m_home(std::move(home)), m_cwd(std::move(cwd)), m_report(report) {}
  struct Result {
    int code = -1;
    QString out;
  };
  Result run(const QStringList& args, int ms = 120000) {
    QProcess p;
    start(p, args);
    const bool done = p.waitForFinished(ms);
    if (!done) {
      p.kill();
      p.waitForFinished(5000);
    }
    Result r{done && p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAll())};
    m_report.setOutput("zerostudio " + args.join(' ') + " #" + QString::number(++m_count), r.out);
    return r;
  }
  void start(QProcess& p, const QStringList& args) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("XDG_CONFIG_HOME", m_home);
    p.setProcessEnvironment(env);
    p.setWorkingDirectory(m_cwd);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(zs::test::cliPath(), args);
    p.waitForStarted();
  }
  JobQueue queue() const { return JobQueue(m_home.toStdString() + "/zerostudio"); }

 private:
  QString m_home, m_cwd;
  zs::test::FailureReport& m_report;
  int m_count = 0;
};

}  // namespace

class TestQueue : public QObject {
  Q_OBJECT

 private slots:
  // Adding checks the config with its overrides and keeps a copy (later edits of the file do not
  // change the job); each job gets its own new run folder under logging.runs_root, even when
  // added in the same second; a bad override adds nothing; a damaged queue file is named.
  void addSnapshotsTheConfigIntoAUniqueRunFolder() {
    QTemporaryDir dir;
    const JobQueue q(dir.path().toStdString() + "/cfg");
    const QString source = dir.path() + "/mine.yaml";
    QVERIFY(QFile::copy(zs::test::quickstart(), source));
    zs::train::JobRequest r{source.toStdString(), tinyOverrides(7), 0, dir.path().toStdString(), 0};
    const auto a = q.add(r), b = q.add(r);
    QCOMPARE(a.id, 1);
    QCOMPARE(b.id, 2);
    QVERIFY(a.run_dir != b.run_dir);
    QVERIFY(QDir(QString::fromStdString(a.run_dir)).exists() && QDir(QString::fromStdString(b.run_dir)).exists());
    QCOMPARE(QString::fromStdString(a.run_dir).section('/', 0, -2), dir.path() + "/runs");  // runs_root "runs", from the job's folder
    QVERIFY(QString::fromStdString(a.name).startsWith("mine-"));
    QFile::remove(source);  // the job keeps its copy
    const auto copy = zs::config::load_config_file(a.config);
    QCOMPARE(copy.config.training.max_steps, 7);
    QCOMPARE(copy.config.training.batch_size, 4);
    QCOMPARE(q.read().jobs.size(), std::size_t{2});

    QVERIFY(QFile::copy(zs::test::quickstart(), source));
    r.overrides = {"training.batch_size=zero"};
    try {
      q.add(r);
      QFAIL("a bad override was accepted");
    } catch (const zs::config::ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("training.batch_size") != std::string::npos, e.what());
    }
    QCOMPARE(q.read().jobs.size(), std::size_t{2});
    QCOMPARE(QDir(dir.path() + "/runs").entryList(QDir::Dirs | QDir::NoDotAndDotDot).size(), 2);

    zs::io::write_file_atomic(q.file(), "{\"jobs\": [");
    try {
      q.read();
      QFAIL("a damaged queue file was read");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find(q.file() + ": the queue file is damaged") == 0, e.what());
    }
  }

  // Reorder, stop a waiting job, retry it, edit a waiting job's config (a bad edit changes
  // nothing), remove (refused while the job's lock is held, i.e. it runs).
  // Two entries with one id (a job pasted into queue.json) are refused by every reader, naming the
  // id and changing nothing; `queue run` ends at once with that error instead of restarting the
  // copy forever (issue 59 item 3: 53 restarts in 150 s).
  void duplicateIdsAreRefused() {
    const QTemporaryDir home;
    const JobQueue q(home.path().toStdString() + "/zerostudio");
    QDir().mkpath(QString::fromStdString(q.dir()));
    const std::string text = R"({"format": "zerostudio-queue", "version": 1, "next_id": 8, "jobs": [
      {"id": 7, "config": "/nowhere/a.yaml", "run_dir": "/nowhere/a", "state": "running"},
      {"id": 3, "config": "/nowhere/b.yaml", "run_dir": "/nowhere/b", "state": "waiting"},
      {"id": 7, "config": "/nowhere/a.yaml", "run_dir": "/nowhere/a", "state": "running"}]})";
    std::ofstream(q.file()) << text;
    try {
      q.read();
      QFAIL("a queue with two jobs of id 7 was read");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).startsWith(QString::fromStdString(q.file() + ": more than one job has the id 7;")), e.what());
    }
    zs::test::FailureReport report;
    Cli cli(home.path(), home.path(), report);
    const auto r = cli.run({"queue", "run"}, 30000);
    QVERIFY2(r.code != 0 && r.code != -1 && r.out.contains("more than one job has the id 7"), qPrintable(r.out));
    QVERIFY(!r.out.contains("resuming"));
    std::ifstream in(q.file());
    const std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    QCOMPARE(after, text);
  }

  // Integers of a job are integers in range: a float such as 1e56 was cast by nlohmann
  // (undefined behaviour; found by make fuzz, tests/fuzz/regressions/queue_json).
  void aNumberOutOfRangeIsRefusedByName() {
    const QTemporaryDir home;
    const JobQueue q(home.path().toStdString() + "/zerostudio");
    QDir().mkpath(QString::fromStdString(q.dir()));
    std::ofstream(q.file()) << R"({"format": "zerostudio-queue", "version": 1, "next_id": 2, "jobs": [
      {"id": 1, "config": "/nowhere/a.yaml", "run_dir": "/nowhere/a", "num_processes": 1e56}]})";
    try {
      q.read();
      QFAIL("a job with 1e56 processes was read");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).startsWith(QString::fromStdString(
                   q.file() + ": job: num_processes: expected an integer from 1 to 4096, found 1e+56")),
               e.what());
    }
  }

  // The runner's bound on claiming one job again and again (a queue file edited behind it): the
  // claim past kMaxClaimsInARow in a row is refused, which fails the job; another job in between
  // starts the count anew.
  void oneJobIsClaimedAtMostThreeTimesInARow() {
    QCOMPARE(zs::cli::kMaxClaimsInARow, 3);
    zs::cli::ClaimStreak streak;
    for (int i = 1; i <= 3; ++i) {
      QVERIFY(streak.allow(7));
      QCOMPARE(streak.count(), i);
    }
    QVERIFY(!streak.allow(7));
    QCOMPARE(streak.count(), 4);
    QVERIFY(streak.allow(8));
    QCOMPARE(streak.count(), 1);
    QVERIFY(streak.allow(7));
    QVERIFY(streak.allow(7));
    QVERIFY(streak.allow(7));
    QVERIFY(!streak.allow(7));
  }

  void editsFollowTheRules() {
    QTemporaryDir dir;
    const JobQueue q(dir.path().toStdString() + "/cfg");
    const zs::train::JobRequest r{zs::test::quickstart().toStdString(), tinyOverrides(5), 0, dir.path().toStdString(), 0};
    for (int i = 0; i < 3; ++i) q.add(r);
    auto ids = [&] {
      std::vector<std::int64_t> out;
      for (const auto& j : q.read().jobs) out.push_back(j.id);
      return out;
    };
    q.move(3, 0);
    QCOMPARE(ids(), (std::vector<std::int64_t>{3, 1, 2}));
    q.reorder({2, 1});
    QCOMPARE(ids(), (std::vector<std::int64_t>{2, 1, 3}));
    q.request_stop(1);
    QCOMPARE(q.read().find(1)->state, JobState::stopped);
    q.requeue(1);
    QCOMPARE(q.read().find(1)->state, JobState::waiting);

    const std::string copy = q.read().find(2)->config;
    const std::string before = zs::io::read_file(copy);
    try {
      q.replace_config(2, "version: 2\ntraining:\n  max_steps: -4\n");
      QFAIL("an invalid config was accepted");
    } catch (const zs::config::ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("training.max_steps") != std::string::npos, e.what());
    }
    QCOMPARE(zs::io::read_file(copy), before);
    q.replace_config(2, before + "\n# edited\n");
    QVERIFY(zs::io::read_file(copy).ends_with("# edited\n"));

    q.update([](zs::train::QueueState& st) { st.find(3)->state = JobState::running; });
    {
      const zs::FileLock live(q.job_lock(3));
      QVERIFY(q.job_live(3));
      QCOMPARE(q.shown_state(*q.read().find(3)), std::string("running"));
      QVERIFY_THROWS_EXCEPTION(zs::Error, q.remove(3));
      try {
        q.replace_config(3, before);
        QFAIL("a running job's config was replaced");
      } catch (const zs::Error& e) {
        QVERIFY2(std::string(e.what()).find("only a waiting job's config can change") != std::string::npos, e.what());
      }
    }
    QCOMPARE(q.shown_state(*q.read().find(3)), std::string("interrupted"));  // marked running, held by nobody
    const std::string runDir = q.read().find(3)->run_dir;
    q.remove(3);
    QVERIFY(!q.read().find(3));
    QVERIFY(!QFile::exists(QString::fromStdString(q.read().find(1)->config).replace("/1.yaml", "/3.yaml")));
    QVERIFY(!QDir(QString::fromStdString(runDir)).exists());  // an empty run folder goes with it
  }

  // Runners on four threads claim from one queue at once: every job exactly once; a claimed job's
  // lock is held until it is released; a job marked running with a free lock is claimed again as
  // resumed; a paused queue gives nothing.
  void eachJobIsClaimedOnce() {
    QTemporaryDir dir;
    const JobQueue q(dir.path().toStdString() + "/cfg");
    const zs::train::JobRequest r{zs::test::quickstart().toStdString(), tinyOverrides(5), 0, dir.path().toStdString(), 0};
    for (int i = 0; i < 12; ++i) q.add(r);
    std::mutex m;
    std::vector<zs::train::ClaimedJob> claimed;
    std::vector<std::thread> runners;
    for (int t = 0; t < 4; ++t)
      runners.emplace_back([&, t] {
        while (auto c = q.claim_next(1000 + t)) {
          const std::lock_guard g(m);
          claimed.push_back(std::move(*c));
        }
      });
    for (auto& t : runners) t.join();
    std::set<std::int64_t> ids;
    for (const auto& c : claimed) ids.insert(c.job.id);
    QCOMPARE(claimed.size(), std::size_t{12});
    QCOMPARE(ids.size(), std::size_t{12});
    for (const auto& j : q.read().jobs) {
      QCOMPARE(j.state, JobState::running);
      QCOMPARE(j.starts, 1);
      QVERIFY(q.job_live(j.id));
    }
    QVERIFY(!q.claim_next(1));
    claimed.front().lock.release();  // its runner went away
    const std::int64_t cut = claimed.front().job.id;
    QCOMPARE(q.shown_state(*q.read().find(cut)), std::string("interrupted"));
    q.set_paused(true);
    QVERIFY(!q.claim_next(1));
    q.set_paused(false);
    auto again = q.claim_next(2);
    QVERIFY(again);
    QCOMPARE(again->job.id, cut);
    QVERIFY(again->resumed);
    QCOMPARE(q.read().find(cut)->starts, 2);
  }

  // Three tiny jobs from the CLI, the middle one failing (its dataset is gone by the time it
  // runs): `queue run` runs them in order, each with exactly one start, records the failure with
  // its exit code and error, goes on, and exits 0. --stop-on-failure stops at a failure.
  void cliJobsRunInOrder() {
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    const QString data = dir.path() + "/gone";
    QVERIFY(QDir().mkpath(data + "/images"));
    QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart()} + tinyJob(6)).code == 0);
    const auto added = cli.run(QStringList{"queue", "add", zs::test::quickstart(), "--set", "data.generate=none", "--set",
                                           "data.path=" + data} + tinyJob(6));
    QCOMPARE(added.code, 0);
    QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart(), "--num-processes", "1"} + tinyJob(6)).code == 0);
    QVERIFY(QDir(data).removeRecursively());
    const auto listed = cli.run({"queue", "list"});
    QCOMPARE(listed.out.count("waiting"), 3);

    const auto ran = cli.run({"queue", "run"});
    QVERIFY2(ran.code == 0, qPrintable(ran.out));
    const auto jobs = cli.queue().read().jobs;
    QCOMPARE(jobs.size(), std::size_t{3});
    QCOMPARE(jobs[0].state, JobState::finished);
    QCOMPARE(jobs[1].state, JobState::failed);
    QCOMPARE(jobs[1].exit_code, 1);
    QVERIFY2(QString::fromStdString(jobs[1].last_error).contains(data), jobs[1].last_error.c_str());
    QCOMPARE(jobs[2].state, JobState::finished);
    double last = 0;
    for (int i : {0, 2}) {
      report.addRun(QString::fromStdString(jobs[i].run_dir));
      const auto starts = events(jobs[i].run_dir, "run_start");
      QCOMPARE(starts.size(), std::size_t{1});
      QVERIFY(starts[0]["time"].get<double>() > last);  // in queue order
      last = starts[0]["time"].get<double>();
      QCOMPARE(events(jobs[i].run_dir, "run_end").back().value("reason", ""), std::string("finished"));
    }
    QVERIFY(ran.out.indexOf("job 1: finished") < ran.out.indexOf("job 2: failed (exit 1)"));
    QVERIFY(ran.out.indexOf("job 2: failed") < ran.out.indexOf("job 3: finished"));
    QVERIFY(cli.run({"queue", "list"}).out.contains("error: "));

    // --stop-on-failure: the failed job again, then a good one that must not start.
    QVERIFY(cli.run({"queue", "retry", "2"}).code == 0);
    QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart()} + tinyJob(3)).code == 0);
    const auto stopped = cli.run({"queue", "run", "--stop-on-failure"});
    QCOMPARE(stopped.code, 1);
    QCOMPARE(cli.queue().read().find(4)->state, JobState::waiting);
    QVERIFY(cli.run({"queue", "remove", "2"}).code == 0);
    QCOMPARE(cli.run({"queue", "remove", "2"}).code, 1);
  }

  // A model whose files cannot be read is refused when the job is added (no run folder is
  // reserved), and, broken after that, fails in the runner before anything is written into its
  // run folder; the errors name the file (issue 59 item 11).
  void brokenModelLeavesNoRunBehind() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    const QString model = dir.path() + "/model", vocab = model + "/tokenizer/vocab.json";
    QCOMPARE(QProcess::execute("cp", {"-r", zs::test::sharedDir() + "/fixtures/sd15-tiny", model}), 0);
    QVERIFY(QFile::rename(vocab, vocab + ".away"));
    const QStringList add = QStringList{"queue", "add", zs::test::quickstart(), "--set", "model.path=" + model, "--set",
                                        "model.prediction_type=epsilon", "--set", "data.resolution=32"} + tinyJob(2);
    const auto refused = cli.run(add);
    QCOMPARE(refused.code, 1);
    QVERIFY2(refused.out.contains("vocab.json"), qPrintable(refused.out));
    QVERIFY(!QFileInfo::exists(dir.path() + "/runs"));
    QVERIFY(cli.queue().read().jobs.empty());

    QVERIFY(QFile::rename(vocab + ".away", vocab));
    QCOMPARE(cli.run(add).code, 0);
    QVERIFY(QFile::remove(vocab));
    const auto ran = cli.run({"queue", "run"});
    const auto jobs = cli.queue().read().jobs;
    QCOMPARE(jobs.size(), std::size_t{1});
    QCOMPARE(jobs[0].state, JobState::failed);
    QVERIFY2(QString::fromStdString(jobs[0].last_error).contains("vocab.json"), jobs[0].last_error.c_str());
    // The folder `queue add` reserved stays empty: no config, events or logs of a run that never was.
    QVERIFY2(QDir(QString::fromStdString(jobs[0].run_dir)).isEmpty(), jobs[0].run_dir.c_str());
    QVERIFY2(ran.out.contains("job 1: failed"), qPrintable(ran.out));
  }

  // A job of two ranks runs through `launch` (both ranks in one run folder); a job whose estimate
  // does not fit --gpu-memory is flagged when added, not refused.
  void twoRankJobAndTheFitFlag() {
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    const auto added = cli.run(QStringList{"queue", "add", zs::test::quickstart(), "--num-processes", "2", "--gpu-memory", "1MiB"} +
                               tinyJob(6));
    QCOMPARE(added.code, 0);
    QVERIFY2(added.out.contains("(2 ranks)") && added.out.contains("warning: job 1 may not fit: estimate"), qPrintable(added.out));
    const auto job = cli.queue().read().jobs.at(0);
    QCOMPARE(job.num_processes, 2);
    QVERIFY(job.fit_note.find("does not fit 1.0 MiB") != std::string::npos);
    QVERIFY(cli.run({"queue", "list"}).out.contains("may not fit: estimate"));
    report.addRun(QString::fromStdString(job.run_dir));
    QCOMPARE(cli.run({"queue", "run"}).code, 0);
    QCOMPARE(cli.queue().read().jobs.at(0).state, JobState::finished);
    const auto starts = events(job.run_dir, "run_start");
    QCOMPARE(starts.size(), std::size_t{1});
    QCOMPARE(starts[0].value("world_size", 0), 2);
    QVERIFY(QFile::exists(QString::fromStdString(job.run_dir) + "/logs/rank1.log"));
  }

  // `queue run --watch` waits for jobs: one added while it waits runs, and SIGTERM while no job
  // runs ends it with 0.
  void watchRunsJobsAddedLater() {
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    QProcess runner;
    cli.start(runner, {"queue", "run", "--watch"});
    QElapsedTimer t;
    t.start();
    QTRY_VERIFY_WITH_TIMEOUT(QString::fromUtf8(runner.peek(4096)).contains("waiting for new ones"), 20000);
    QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart()} + tinyJob(3)).code == 0);
    QTRY_COMPARE_WITH_TIMEOUT(cli.queue().read().jobs.at(0).state, JobState::finished, 60000);
    QVERIFY(cli.queue().runner_active());
    ::kill(static_cast<pid_t>(runner.processId()), SIGTERM);
    QVERIFY(runner.waitForFinished(20000));
    report.setOutput("runner", QString::fromUtf8(runner.readAll()));
    QCOMPARE(runner.exitStatus(), QProcess::NormalExit);
    QCOMPARE(runner.exitCode(), 0);
    QVERIFY(!cli.queue().runner_active());
  }

  // Two `queue run`s started together: one runs, the other waits for it; every job starts once.
  void twoRunnersStartEachJobOnce() {
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    for (int i = 0; i < 3; ++i) QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart()} + tinyJob(3)).code == 0);
    QProcess a, b;
    cli.start(a, {"queue", "run"});
    cli.start(b, {"queue", "run"});
    QVERIFY(a.waitForFinished(120000) && b.waitForFinished(120000));
    const QString out = QString::fromUtf8(a.readAll()) + "\n----\n" + QString::fromUtf8(b.readAll());
    report.setOutput("two runners", out);
    QCOMPARE(a.exitCode(), 0);
    QCOMPARE(b.exitCode(), 0);
    QCOMPARE(out.count("waiting for it to finish"), 1);
    for (const auto& j : cli.queue().read().jobs) {
      QCOMPARE(j.state, JobState::finished);
      QCOMPARE(j.starts, 1);
      QCOMPARE(events(j.run_dir, "run_start").size(), std::size_t{1});
      QCOMPARE(out.count(QString("job %1 (").arg(j.id)), 1);
    }
  }

  // The runner and the trainer killed with SIGKILL after the first checkpoint (the job is paused
  // there so that it cannot finish first): the job shows as interrupted, and the next `queue run`
  // resumes it from that checkpoint to its end.
  void killedJobResumesAtTheNextRun() {
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart()} + tinyJob(30)).code == 0);
    const auto job = cli.queue().read().jobs.at(0);
    report.addRun(QString::fromStdString(job.run_dir));
    QProcess runner;
    cli.start(runner, {"queue", "run"});
    QElapsedTimer t;
    t.start();
    const QString first = QString::fromStdString(job.run_dir) + "/checkpoints/step_3/meta.json";
    while (!QFile::exists(first) && t.elapsed() < 60000 && runner.state() == QProcess::Running) QThread::msleep(10);
    QVERIFY2(QFile::exists(first), "no first checkpoint");
    zs::io::write_file_atomic(job.run_dir + "/control.json", "{\"pause\": true}");
    std::int64_t pid = 0;
    while ((pid = cli.queue().read().jobs.at(0).pid) == 0 && t.elapsed() < 60000) QThread::msleep(10);
    QVERIFY(pid > 0);
    ::kill(static_cast<pid_t>(runner.processId()), SIGKILL);
    ::kill(-static_cast<pid_t>(pid), SIGKILL);  // the job's process group
    QVERIFY(runner.waitForFinished(10000));
    while (cli.queue().job_live(job.id) && t.elapsed() < 60000) QThread::msleep(10);
    QVERIFY(events(job.run_dir, "run_end").empty());
    const auto listed = cli.run({"queue", "list"});
    QVERIFY2(listed.out.contains("interrupted"), qPrintable(listed.out));

    const auto again = cli.run({"queue", "run"});
    QCOMPARE(again.code, 0);
    QVERIFY(again.out.contains("resuming after an interruption"));
    const auto starts = events(job.run_dir, "run_start");
    QCOMPARE(starts.size(), std::size_t{2});
    QVERIFY2(starts[1]["resumed_from"].is_string(), starts[1].dump().c_str());
    QVERIFY(starts[1]["step"].get<std::int64_t>() >= 3);
    const auto ends = events(job.run_dir, "run_end");
    QCOMPARE(ends.size(), std::size_t{1});
    QCOMPARE(ends[0].value("reason", ""), std::string("finished"));
    QCOMPARE(ends[0].value("step", std::int64_t{0}), std::int64_t{30});
    const auto done = cli.queue().read().jobs.at(0);
    QCOMPARE(done.state, JobState::finished);
    QCOMPARE(done.starts, 2);
  }

  // `queue stop` ends a running job with a checkpoint as "stopped"; `queue retry` and another run
  // resume it to its end.
  void stopSavesAndRetryResumes() {
    QTemporaryDir dir;
    zs::test::FailureReport report;
    Cli cli(dir.path() + "/cfg", dir.path(), report);
    QVERIFY(cli.run(QStringList{"queue", "add", zs::test::quickstart()} + tinyJob(400)).code == 0);
    const auto job = cli.queue().read().jobs.at(0);
    report.addRun(QString::fromStdString(job.run_dir));
    QProcess runner;
    cli.start(runner, {"queue", "run"});
    QElapsedTimer t;
    t.start();
    while (events(job.run_dir, "metrics").empty() && t.elapsed() < 60000) QThread::msleep(20);
    QVERIFY(cli.run({"queue", "stop", "1"}).code == 0);
    QVERIFY(runner.waitForFinished(60000));
    report.setOutput("runner", QString::fromUtf8(runner.readAll()));
    QCOMPARE(runner.exitCode(), 0);
    auto st = cli.queue().read().jobs.at(0);
    QCOMPARE(st.state, JobState::stopped);
    const auto ends = events(job.run_dir, "run_end");
    QCOMPARE(ends.back().value("reason", ""), std::string("stopped"));
    const std::int64_t at = ends.back().value("step", std::int64_t{0});
    QVERIFY(at < 400);
    QVERIFY(QFile::exists(QString::fromStdString(job.run_dir) + QString("/checkpoints/step_%1/meta.json").arg(at)));

    QVERIFY(cli.run({"queue", "retry", "1"}).code == 0);
    QVERIFY(cli.run({"queue", "pause"}).code == 0);
    const auto paused = cli.run({"queue", "run"});
    QCOMPARE(paused.code, 0);
    QVERIFY(paused.out.contains("the queue is paused"));
    QCOMPARE(events(job.run_dir, "run_start").size(), std::size_t{1});
    QVERIFY(cli.run({"queue", "unpause"}).code == 0);
    // The resumed run goes on from `at` (400 steps would take long: the trainer's own stop is
    // the thing tested, so the second start is stopped again once it has resumed).
    QProcess second;
    cli.start(second, {"queue", "run"});
    while (events(job.run_dir, "run_start").size() < 2 && t.elapsed() < 120000) QThread::msleep(20);
    QVERIFY(cli.run({"queue", "stop", "1"}).code == 0);
    QVERIFY(second.waitForFinished(60000));
    const auto starts = events(job.run_dir, "run_start");
    QCOMPARE(starts.size(), std::size_t{2});
    QCOMPARE(starts[1].value("step", std::int64_t{0}), at);
    QCOMPARE(cli.queue().read().jobs.at(0).starts, 2);
  }
};

ZS_TEST_MAIN(TestQueue);
#include "tst_queue.moc"
