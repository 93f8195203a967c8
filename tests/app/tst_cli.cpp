// The zerostudio executable: exit codes, messages, --help of every command, flag spelling,
// and the config commands end to end.
#include <ATen/ATen.h>

#include <fstream>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "config/config_writer.h"
#include "config/setup_questions.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include "arg_parser.h"
#include "test_support.h"

namespace {

struct Result {
  int code = -1;
  QString out;
  QString err;
};

Result run(const QStringList& args, const QString& cwd = QString(), const QProcessEnvironment& env = {}) {
  QProcess p;
  if (!cwd.isEmpty()) p.setWorkingDirectory(cwd);
  if (!env.isEmpty()) p.setProcessEnvironment(env);
  p.start(zs::test::cliPath(), args);
  if (!p.waitForFinished(60000)) return {};
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

using zs::test::quickstart;
QString seed(const char* name) { return zs::test::testDataDir() + "/seeds/" + name; }

}  // namespace

class TestCli : public QObject {
  Q_OBJECT

 private slots:
  // The bash completion is made from the commands' own tables: for every command it lists, every
  // flag its --help prints is offered (bash runs the script), the top-level --help names every
  // command, and the man page carries every command and flag and renders without groff warnings.
  void completionAndManPageFollowEveryHelp() {
    const Result commands = run({"completion", "--commands"});
    QCOMPARE(commands.code, 0);
    const QStringList names = commands.out.split('\n', Qt::SkipEmptyParts);
    QVERIFY(names.contains("train") && names.contains("config validate") && names.contains("model convert"));
    const Result script = run({"completion", "bash"});
    QCOMPARE(script.code, 0);
    QTemporaryDir dir;
    const QString file = dir.path() + "/zerostudio.bash";
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(script.out.toUtf8());
    f.close();
    const Result man = run({"manpage"});
    QCOMPARE(man.code, 0);
    const QString top = run({"--help"}).out;
    const QRegularExpression flag(R"((?:^|\s)(--[a-z0-9_]+|-[a-zA-Z])\b)");
    for (const QString& name : names) {
      QVERIFY2(top.contains("  " + name.section(' ', 0, 0)), qPrintable(name + " is not in --help"));
      QVERIFY2(man.out.contains(".SS \"" + QString(name).replace("-", "\\-") + "\""), qPrintable(name + " is not in the man page"));
      const Result help = run(name.split(' ') + QStringList{"--help"});
      QCOMPARE(help.code, 0);
      QStringList wanted;
      const QString options = help.out.section("\nOptions:\n", 1).section("\n\n", 0, 0);
      for (const QString& line : options.split('\n')) {
        auto it = flag.globalMatch(line.trimmed().section("  ", 0, 0));  // the flag column, not the help text
        while (it.hasNext()) wanted << it.next().captured(1);
      }
      // What the script offers after "zerostudio <name> -".
      QStringList words = QStringList{"zerostudio"} + name.split(' ') + QStringList{"-"};
      QProcess bash;
      bash.start("bash", {"-c", QString("source %1; COMP_WORDS=(%2); COMP_CWORD=%3; _zerostudio; printf '%s\\n' \"${COMPREPLY[@]}\"")
                                    .arg(file, words.join(' '), QString::number(words.size() - 1))});
      QVERIFY(bash.waitForFinished(20000));
      const QStringList offered = QString::fromUtf8(bash.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts);
      for (const QString& w : wanted) {
        QVERIFY2(offered.contains(w), qPrintable(name + ": " + w + " is not completed (offered: " + offered.join(' ') + ")"));
        if (w.startsWith("--") && w != "--help")
          QVERIFY2(man.out.contains("\\fB\\-\\-" + w.mid(2) + "\\fR"), qPrintable(name + ": " + w + " is not in the man page"));
      }
    }
    // A flag's value from the few words its usage lists.
    QProcess bash;
    bash.start("bash", {"-c", QString("source %1; COMP_WORDS=(zerostudio export ckpt --format lora-); COMP_CWORD=4; _zerostudio; "
                                      "printf '%s\\n' \"${COMPREPLY[@]}\"").arg(file)});
    QVERIFY(bash.waitForFinished(20000));
    QCOMPARE(QString::fromUtf8(bash.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts),
             (QStringList{"lora-kohya", "lora-diffusers", "lora-diffsynth", "lora-musubi", "lora-aitoolkit"}));
    // The man page renders cleanly.
    const QString page = dir.path() + "/zerostudio.1";
    QFile m(page);
    QVERIFY(m.open(QIODevice::WriteOnly));
    m.write(man.out.toUtf8());
    m.close();
    QProcess groff;
    groff.start("groff", {"-man", "-Tutf8", "-ww", "-z", page});
    QVERIFY(groff.waitForFinished(20000));
    QCOMPARE(groff.exitCode(), 0);
    QCOMPARE(QString::fromUtf8(groff.readAllStandardError()), QString());
  }

  void versionAndHelp() {
    const Result v = run({"--version"});
    QCOMPARE(v.code, 0);
    QVERIFY(v.out.startsWith("zerostudio 0."));
    QVERIFY(v.out.contains("LibTorch 1.") || v.out.contains("LibTorch 2."));
    const Result h = run({"--help"});
    QCOMPARE(h.code, 0);
    QVERIFY(h.out.contains("config validate FILE"));
  }

  // `zerostudio doctor` on a played driver (the probe reads ZEROSTUDIO_NVIDIA_PROC and runs
  // ZEROSTUDIO_NVIDIA_SMI): every --json field is there with its type; a 535 driver is refused
  // for the CUDA 13.0 runtime (NVIDIA's minimum: 580.65.06), a V100 (7.0) is named as below the
  // cu130 wheel's oldest compute capability (7.5, PyTorch's RELEASE.md support matrix); without a
  // driver the report says so; a full-size config asking for a GPU cannot run here (exit 1), the
  // CPU quickstart can (exit 0); a missing NVMe folder is named.
  void doctorJudgesTheMachine() {
    QTemporaryDir dir;
    const QString smi = dir.path() + "/nvidia-smi", proc = dir.path() + "/version";
    {
      QFile f(smi);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("#!/bin/sh\n"
              "case \"$1\" in\n"
              "  --query-gpu=*) echo '0, NVIDIA GeForce RTX 3090, 24576, 8.6, 535.54.03'\n"
              "                 echo '1, Tesla V100-PCIE-16GB, 16160, 7.0, 535.54.03' ;;\n"
              "  *) echo '| NVIDIA-SMI 535.54.03    Driver Version: 535.54.03    CUDA Version: 12.2 |' ;;\n"
              "esac\n");
      f.close();
      QVERIFY(f.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner));
      QFile v(proc);
      QVERIFY(v.open(QIODevice::WriteOnly));
      v.write("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n");
    }
    QProcessEnvironment played = QProcessEnvironment::systemEnvironment();
    played.insert("ZEROSTUDIO_NVIDIA_SMI", smi);
    played.insert("ZEROSTUDIO_NVIDIA_PROC", proc);
    const Result r = run({"doctor", "--json", "--nvme-dir", dir.path()}, {}, played);
    QVERIFY2(r.code == 0, qPrintable(r.err + r.out));
    const auto j = nlohmann::json::parse(r.out.toStdString());
    const auto typed = [](const nlohmann::json& o, const char* key, nlohmann::json::value_t type) {
      return o.contains(key) && (o[key].type() == type ||
                                 (type == nlohmann::json::value_t::number_integer && o[key].is_number_integer()));
    };
    using T = nlohmann::json::value_t;
    for (const char* k : {"zerostudio", "torch", "cuda", "nccl"}) QVERIFY2(typed(j["build"], k, T::string), k);
    for (const char* k : {"cuda_build", "cuda_usable"}) QVERIFY2(typed(j["build"], k, T::boolean), k);
    QVERIFY(typed(j["build"], "devices", T::number_integer));
    QVERIFY(typed(j["driver"], "present", T::boolean) && j["driver"]["present"].get<bool>());
    QCOMPARE(j["driver"]["version"].get<std::string>(), std::string("535.54.03"));
    QCOMPARE(j["driver"]["cuda"].get<std::string>(), std::string("12.2"));
    QCOMPARE(j["gpus"].size(), std::size_t{2});
    for (const auto& g : j["gpus"]) {
      QVERIFY(typed(g, "index", T::number_integer) && typed(g, "name", T::string));
      QVERIFY(typed(g, "memory_bytes", T::number_integer) && typed(g, "compute_capability", T::string));
    }
    QCOMPARE(j["gpus"][0]["memory_bytes"].get<std::int64_t>(), std::int64_t{24576} << 20);
    QCOMPARE(j["gpus"][1]["compute_capability"].get<std::string>(), std::string("7.0"));
    const auto& rt = j["runtime"];
    QFile pins(zs::test::sourceDir() + "/tests/peers/requirements.txt");
    QVERIFY(pins.open(QIODevice::ReadOnly));
    QVERIFY2(QString::fromUtf8(pins.readAll()).contains(QString::fromStdString("torch==" + rt["torch"].get<std::string>() + "\n")),
             "the GPU runtime's torch is the pinned one");
    if (!j["build"]["cuda_build"].get<bool>()) QCOMPARE(rt["cuda"].get<std::string>(), std::string("13.0"));
    if (rt["cuda"].get<std::string>().rfind("13.", 0) == 0) {
      QCOMPARE(rt["min_driver"].get<std::string>(), std::string("580.65.06"));
      QVERIFY(!rt["driver_ok"].get<bool>());
    }
    QVERIFY(rt["unsupported_gpus"] == nlohmann::json::array({1}));
    QVERIFY(typed(rt, "oldest_compute_capability", T::string) && typed(rt, "older_runtime", T::string));
    for (const char* k : {"pin", "folder", "found", "problem"}) QVERIFY2(typed(rt, k, T::string), k);
    QVERIFY(typed(rt, "runtime_build", T::boolean));
    QVERIFY2(rt["pin"].get<std::string>().rfind(rt["torch"].get<std::string>() + "+cu", 0) == 0, qPrintable(QString::fromStdString(rt.dump())));
    QVERIFY(rt["problem"].get<std::string>().empty());  // it started: the runtime it found is its own
    // A GPU build against the runtime folder (make run, the package) reports it; a build against
    // another LibTorch (Debian's) does not claim one.
    if (rt["runtime_build"].get<bool>()) QCOMPARE(rt["found"].get<std::string>(), rt["pin"].get<std::string>());
    for (const char* k : {"ram_total", "ram_available", "cgroup_limit", "memlock_limit", "budget"})
      QVERIFY2(typed(j["host"], k, T::number_integer), k);
    QVERIFY(j["host"]["ram_total"].get<std::int64_t>() > 0);
    QVERIFY(typed(j["host"]["pinned"], "checked", T::boolean) && typed(j["host"]["pinned"], "ok", T::boolean));
    QVERIFY(typed(j["host"]["pinned"], "bytes", T::number_integer) && typed(j["host"]["pinned"], "note", T::string));
    QVERIFY(typed(j["shm"], "total", T::number_integer) && typed(j["shm"], "free", T::number_integer));
    const auto& off = j["offload"];
    QCOMPARE(off["path"].get<std::string>(), dir.path().toStdString());
    QVERIFY(off["exists"].get<bool>() && off["writable"].get<bool>());
    QVERIFY(typed(off, "filesystem", T::string) && !off["filesystem"].get<std::string>().empty());
    QVERIFY(typed(off, "free_bytes", T::number_integer) && off["free_bytes"].get<std::int64_t>() > 0);
    QVERIFY(typed(off, "io_uring", T::boolean) && typed(off, "note", T::string));
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 2);  // its test file is gone
    QVERIFY(j["ready_configs"].size() >= 10);
    for (const auto& c : j["ready_configs"]) {
      QVERIFY2(c["error"].is_null(), qPrintable(QString::fromStdString(c.dump())));
      for (const char* k : {"file", "model"}) QVERIFY(typed(c, k, T::string));
      for (const char* k : {"parameters", "processes", "gpu_bytes", "host_bytes", "nvme_bytes"}) QVERIFY(typed(c, k, T::number_integer));
      for (const char* k : {"uses_gpu", "fits_gpu", "fits_host"}) QVERIFY(typed(c, k, T::boolean));
      QVERIFY(c["host_bytes"].get<std::int64_t>() > 0);
    }
    QVERIFY(j["config"].is_null() && j["runs"].get<bool>());
    bool old_driver = false, old_gpu = false;
    for (const auto& f : j["findings"]) {
      for (const char* k : {"level", "topic", "message", "fix"}) QVERIFY(typed(f, k, T::string));
      old_driver |= f["level"] == "problem" && f["topic"] == "driver" && f["message"].get<std::string>().find("535.54.03") != std::string::npos;
      old_gpu |= f["level"] == "problem" && f["topic"] == "gpu" && f["message"].get<std::string>().find("V100") != std::string::npos;
    }
    QVERIFY2(old_gpu, qPrintable(r.out));
    if (rt["cuda"].get<std::string>().rfind("13.", 0) == 0) QVERIFY2(old_driver, qPrintable(r.out));

    // No driver at all: the report says so, in words and in --json.
    QProcessEnvironment none = QProcessEnvironment::systemEnvironment();
    none.insert("ZEROSTUDIO_NVIDIA_SMI", dir.path() + "/absent-smi");
    none.insert("ZEROSTUDIO_NVIDIA_PROC", dir.path() + "/absent-version");
    const Result text = run({"doctor"}, {}, none);
    QCOMPARE(text.code, 0);
    QVERIFY2(text.out.contains("no NVIDIA driver") && text.out.contains("GPUs        none"), qPrintable(text.out));
    // A full-size model asking for a GPU cannot run here; the CPU quickstart can.
    const QString sd15 = zs::test::sourceDir() + "/configs/sd15-lora.yaml";
    const Result full = run({"doctor", sd15}, {}, none);
    QVERIFY2(full.code == 1 && full.out.contains("full-size model") && full.out.contains("cannot run here"), qPrintable(full.out));
    const Result quick = run({"doctor", quickstart(), "--json"}, {}, none);
    QVERIFY2(quick.code == 0, qPrintable(quick.out + quick.err));
    const auto q = nlohmann::json::parse(quick.out.toStdString());
    QVERIFY(q["runs"].get<bool>() && !q["config"]["uses_gpu"].get<bool>() && q["config"]["error"].is_null());
    // NVMe offload into a folder that does not exist.
    const std::string missing = (dir.path() + "/no-such-folder").toStdString();
    const Result nvme = run({"doctor", quickstart(), "--set", "zero.stage=2", "--set", "zero.offload_optimizer.device=nvme", "--set",
                             QString::fromStdString("zero.offload_optimizer.nvme_path=" + missing)},
                            {}, none);
    QVERIFY2(nvme.code == 1 && nvme.out.contains(QString::fromStdString(missing)), qPrintable(nvme.out + nvme.err));
  }

  void aForeignRuntimeIsRefused() {
    // The GPU build checks the runtime folder it loaded LibTorch from against the pin it was built
    // for. Played with a folder of links to the real libraries whose version.py and marker name
    // another torch, put first by LD_LIBRARY_PATH: the program refuses before anything starts,
    // saying what to do; `zerostudio runtime` still runs.
    const Result doctor = run({"doctor", "--json"});
    QVERIFY2(doctor.code == 0, qPrintable(doctor.err));
    const auto rt = nlohmann::json::parse(doctor.out.toStdString())["runtime"];
    if (!rt["runtime_build"].get<bool>()) QSKIP("not a build against the runtime folder (make test uses Debian's LibTorch)");
    const QString real = QString::fromStdString(rt["folder"].get<std::string>());
    QTemporaryDir fake;
    QVERIFY(QDir().mkpath(fake.path() + "/torch/lib"));
    for (const QFileInfo& lib : QDir(real + "/torch/lib").entryInfoList(QDir::Files))
      QVERIFY(QFile::link(lib.absoluteFilePath(), fake.path() + "/torch/lib/" + lib.fileName()));
    QVERIFY(QFile::link(real + "/nvidia", fake.path() + "/nvidia"));  // the libraries' $ORIGIN/../../nvidia
    for (const auto& [file, text] : {std::pair{QString("/torch/version.py"), QByteArray("__version__ = '2.10.0+cu128'\n")},
                                     std::pair{QString("/zerostudio-runtime.txt"), QByteArray("torch 2.10.0+cu128\n")}}) {
      QFile f(fake.path() + file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(text);
    }
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("LD_LIBRARY_PATH", fake.path() + "/torch/lib");
    const Result refused = run({"--version"}, {}, env);
    QVERIFY2(refused.code == 1, qPrintable(refused.out + refused.err));
    QVERIFY2(refused.err.contains("built for the GPU runtime torch " + QString::fromStdString(rt["pin"].get<std::string>())) &&
                 refused.err.contains("torch 2.10.0+cu128") && refused.err.contains("zerostudio runtime install"),
             qPrintable(refused.err));
    const Result status = run({"runtime", "status"}, {}, env);
    QVERIFY2(status.out.contains("zs-runtime: torch " + QString::fromStdString(rt["pin"].get<std::string>())), qPrintable(status.out + status.err));
  }

  void aFullSizeModelOnTheCpuNeedsAllowCpu() {
    // Where a run trains is said before it starts; a full-size model that would land on the CPU is
    // refused, with the reason and the fix, unless --allow-cpu; a tiny one never is.
    QTemporaryDir dir;
    QProcessEnvironment none = QProcessEnvironment::systemEnvironment();
    none.insert("ZEROSTUDIO_NVIDIA_SMI", dir.path() + "/absent-smi");
    none.insert("ZEROSTUDIO_NVIDIA_PROC", dir.path() + "/absent-version");
    const QString sd15 = zs::test::sourceDir() + "/configs/sd15-lora.yaml";
    const QString runs = "logging.runs_root=" + dir.path() + "/runs";
    const Result refused = run({"train", sd15, "--set", runs}, {}, none);
    if (refused.out.contains("device: GPU")) QSKIP("this machine trains sd15-lora.yaml on a GPU");
    QVERIFY2(refused.code == 1, qPrintable(refused.out + refused.err));
    QVERIFY2(refused.out.contains("device: CPU ("), qPrintable(refused.out));
    QVERIFY2(refused.err.contains("full-size model") && refused.err.contains("pass --allow-cpu") &&
                 refused.err.contains("To use a GPU:"),
             qPrintable(refused.err));
    QVERIFY2(!QDir(dir.path() + "/runs").exists(), "refused before the run folder is made");
    const Result launch = run({"launch", "--num_processes", "2", sd15, "--set", runs}, {}, none);
    QVERIFY2(launch.code == 1 && launch.err.contains("pass --allow-cpu"), qPrintable(launch.out + launch.err));
    // --allow-cpu lets it start (it then fails on the model files this test does not have).
    const Result allowed = run({"train", sd15, "--allow-cpu", "--set", runs, "--set", "model.path=" + dir.path() + "/no-model"}, {}, none);
    QVERIFY2(!allowed.err.contains("--allow-cpu"), qPrintable(allowed.err));
    // A tiny model asking for a GPU trains on the CPU without being asked, and says so.
    QVERIFY(QDir().mkpath(dir.path() + "/empty-data"));
    const Result tiny = run({"train", quickstart(), "--set", "launch.use_cpu=false", "--set", runs, "--set",
                             "data.path=" + dir.path() + "/empty-data", "--set", "data.generate=none"},
                            {}, none);
    QVERIFY2(tiny.out.contains("device: CPU (") && !tiny.err.contains("--allow-cpu"), qPrintable(tiny.out + tiny.err));
  }

  void everyCommandHasHelp_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("usage");
    QTest::newRow("config") << QStringList{"config", "--help"} << "Usage: zerostudio config {init,validate,import,export,schema}";
    QTest::newRow("validate") << QStringList{"config", "validate", "--help"} << "Usage: zerostudio config validate FILE";
    QTest::newRow("import") << QStringList{"config", "import", "-h"} << "Usage: zerostudio config import --accelerate";
    QTest::newRow("export") << QStringList{"config", "export", "--help"} << "Usage: zerostudio config export FILE";
    QTest::newRow("schema") << QStringList{"config", "schema", "--help"} << "Usage: zerostudio config schema";
    QTest::newRow("train") << QStringList{"train", "--help"} << "Usage: zerostudio train FILE";
    QTest::newRow("runtime") << QStringList{"runtime", "--help"} << "Usage: zerostudio runtime install|remove";
    QTest::newRow("make-dataset") << QStringList{"make-dataset", "--help"} << "Usage: zerostudio make-dataset shapes";
    QTest::newRow("checkpoints") << QStringList{"checkpoints", "--help"} << "Usage: zerostudio checkpoints RUN_DIR";
    QTest::newRow("export checkpoint") << QStringList{"export", "--help"} << "Usage: zerostudio export CHECKPOINT";
    QTest::newRow("estimate") << QStringList{"estimate", "--help"} << "Usage: zerostudio estimate FILE";
    QTest::newRow("doctor") << QStringList{"doctor", "--help"} << "Usage: zerostudio doctor [CONFIG.yaml]";
    QTest::newRow("cache") << QStringList{"cache", "--help"} << "Usage: zerostudio cache FILE";
    QTest::newRow("tensorboard") << QStringList{"tensorboard", "--help"} << "Usage: zerostudio tensorboard RUN_DIR";
    QTest::newRow("model info") << QStringList{"model", "info", "--help"} << "Usage: zerostudio model info DIR";
    QTest::newRow("model eval") << QStringList{"model", "eval", "--help"} << "Usage: zerostudio model eval --model DIR";
    QTest::newRow("model convert") << QStringList{"model", "convert", "--help"} << "Usage: zerostudio model convert DIR";
  }

  // `estimate --json`: the documented object, ZeRO's figures for SD 1.5 a user can check by hand
  // (bf16, stage 2, N = 8: 2Ψ + 14Ψ/8 on the device), and the suggestion for a small card.
  // The caches are off, so the frozen CLIP and VAE are on the device (subtracted below); with
  // them on, an estimate puts them in CPU memory whether model.path is set or not (issue 33).
  void estimatePrintsTheDocumentedJson() {
    const Result r = run({"estimate", quickstart(), "--set", "model.preset=sd15", "--set", "precision=bf16", "--set",
                          "zero.stage=2", "--set", "data.resolution=512", "--set", "training.batch_size=1", "--set",
                          "data.cache_latents=false", "--set", "data.cache_text_embeddings=false",
                          "--num_processes", "8", "--gpu-memory", "8GiB", "--json"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const auto j = nlohmann::json::parse(r.out.toStdString());
    const std::int64_t psi = 859'520'964;
    QCOMPARE(j["parameters"].get<std::int64_t>(), psi);
    QCOMPARE(j["world_size"].get<int>(), 8);
    QCOMPARE(j["stage"].get<int>(), 2);
    QCOMPARE(j["precision"].get<std::string>(), std::string("bf16"));
    const auto& gpu = j["gpu"];
    const std::int64_t states = gpu["parameters"].get<std::int64_t>() + gpu["gradients"].get<std::int64_t>() +
                                gpu["optimizer_states"].get<std::int64_t>() -
                                2 * j["frozen_parameters"].get<std::int64_t>() - 2 * j["frozen_fp32_parameters"].get<std::int64_t>();
    // 2Ψ + 14Ψ/8, but for the io unit (2.07 M parameters: conv_in, time embedding, conv_out),
    // whose gradients stay whole because it runs at both ends of the forward: 0.13 % more.
    const double ratio = static_cast<double>(states) / static_cast<double>(2 * psi + 14 * psi / 8);
    QVERIFY2(ratio >= 1 && ratio < 1.002, qPrintable(QString::number(ratio, 'f', 5)));
    QVERIFY(gpu["activations"].get<std::int64_t>() > 0);
    QCOMPARE(j["gpu_memory"].get<std::int64_t>(), std::int64_t{8} << 30);
    QCOMPARE(j["fits"].get<bool>(), gpu["total"].get<std::int64_t>() <= (std::int64_t{8} << 30));
    QVERIFY(j["suggestion"].is_object());
    QVERIFY(j["nvme"]["total"].is_number_integer());
    const Result table = run({"estimate", quickstart(), "--gpu-memory", "1MiB"});
    QCOMPARE(table.code, 0);
    QVERIFY2(table.out.contains("does NOT fit"), qPrintable(table.out));
    const Result bad = run({"estimate", quickstart(), "--gpu-memory", "lots"});
    QCOMPARE(bad.code, 1);
    QVERIFY2(bad.err.contains("\"lots\" is not a memory size"), qPrintable(bad.err));
  }

  // Issue 18's memory goals, through `zerostudio estimate` on the shipped configs (README quotes
  // these figures; tst_estimate estimateFollowsGpuMeasurements holds the estimate to what GPUs measured).
  void memoryGoalsOfTheShippedConfigs_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<double>("gib");
    const QString sdxl = zs::test::sourceDir() + "/configs/sdxl-finetune-zero2-offload.yaml";
    const QString sd15 = zs::test::sourceDir() + "/configs/sd15-finetune-zero2-offload.yaml";
    QTest::newRow("SDXL 1024 px batch 8, stage 2 + CPU optimizer") << QStringList{sdxl} << 9.0;
    QTest::newRow("SD 1.5 batch 8 without EMA")
        << QStringList{sd15, "--set", "training.batch_size=8", "--set", "ema.enabled=false"} << 4.0;
    QTest::newRow("SDXL batch 1, stage 3 + CPU parameters")
        << QStringList{sdxl, "--set", "training.batch_size=1", "--set", "zero.stage=3", "--set",
                       "zero.offload_param.device=cpu"} << 4.0;
  }
  void memoryGoalsOfTheShippedConfigs() {
    QFETCH(QStringList, args);
    QFETCH(double, gib);
    const Result r = run(QStringList{"estimate"} + args + QStringList{"--num_processes", "1", "--json"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const auto j = nlohmann::json::parse(r.out.toStdString());
    const double device = j["gpu"]["total"].get<double>() / double(1 << 30);
    qInfo("device %.2f GiB (goal %.1f), cache-filling pass %.2f GiB", device, gib, j["cache_pass"].get<double>() / double(1 << 30));
    QVERIFY2(device <= gib, qPrintable(QString::number(device)));
    QVERIFY(j["cache_pass"].get<std::int64_t>() > 0);  // both caches on: the pass is estimated apart
  }

  // `config init` asks the wizard's questions in the terminal and writes the YAML the same
  // answers make in the wizard (both go through config::apply_answers).
  void configInitWritesWhatTheAnswersMean() {
    QTemporaryDir dir;
    const QString out = dir.path() + "/init.yaml";
    QProcess p;
    p.start(zs::test::cliPath(), {"config", "init", "-o", out});
    QVERIFY(p.waitForStarted());
    // compute environment, machine type, machines, DeepSpeed, its file, stage, optimizer offload,
    // accumulation, clipping, processes, precision; Enter keeps the rest.
    p.write("\nmulti_cpu\n\nyes\n\n\ncpu\n2\n1.0\n2\nbf16\n");
    for (int i = 0; i < 40; ++i) p.write("\n");
    p.closeWriteChannel();
    QVERIFY(p.waitForFinished(60000));
    const QString text = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(p.exitCode() == 0, qPrintable(text + p.readAllStandardError()));
    QVERIFY(text.contains("Do you want to use DeepSpeed?"));
    QVERIFY(text.indexOf("Which type of machine") < text.indexOf("Do you want to use DeepSpeed?"));
    QVERIFY(text.indexOf("ZeRO optimization stage") < text.indexOf("How many processes"));
    QVERIFY(text.contains("Memory per process: device"));
    QVERIFY(!text.contains("Where to offload parameters?"));  // stage 2: not asked

    const auto quickstart_cfg = zs::config::load_config_file(quickstart().toStdString());
    auto answers = zs::config::answers_from_config(quickstart_cfg.config);
    answers["machine_type"] = "multi_cpu";
    answers["use_deepspeed"] = "yes";
    answers["zero_stage"] = "2";
    answers["offload_optimizer"] = "cpu";
    answers["gradient_accumulation_steps"] = "2";
    answers["gradient_clipping"] = "1.0";
    answers["num_processes"] = "2";
    answers["mixed_precision"] = "bf16";
    const auto expected = zs::config::apply_answers(answers, zs::config::to_yaml(quickstart_cfg.config));
    QVERIFY(expected.loaded.has_value());
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), QString::fromStdString(zs::config::to_yaml(expected.loaded->config)));
    const auto written = zs::config::load_config_file(out.toStdString()).config;
    QCOMPARE(written.zero.stage, std::int64_t{2});
    QCOMPARE(written.launch.num_processes, std::int64_t{2});
  }

  // `model info` and `model eval` on the sd15-tiny fixture folder reproduce the reference outputs,
  // and so do they on the single file `model convert` makes of it (with the folder as --config).
  void modelInfoAndEvalReproduceTheFixtures() {
    ZS_REQUIRE_SHARED();
    const QString model = zs::test::sharedDir() + "/fixtures/sd15-tiny";
    const QString ref = zs::test::sharedDir() + "/fixtures/sd15-tiny-reference";
    const Result info = run({"model", "info", model});
    QVERIFY2(info.code == 0, qPrintable(info.err));
    QVERIFY2(info.out.contains("unet  diffusers.UNet2DConditionModel  792964 parameters  F32"), qPrintable(info.out));
    QVERIFY(info.out.contains("vae  diffusers.AutoencoderKL  658375 parameters"));
    QVERIFY(info.out.contains("tokenizer  transformers.CLIPTokenizer  vocabulary 49408"));
    QTemporaryDir dir;
    struct Case {
      const char* component;
      const char* inputs;
      std::vector<const char*> outputs;
    };
    const Case cases[] = {{"unet", "unet_io", {"out"}},
                          {"vae-encode", "vae_io", {"posterior_mean", "posterior_logvar"}},
                          {"vae-decode", "vae_io", {"decoded"}},
                          {"text-encoder", "text_io", {"last_hidden_state", "penultimate_hidden_state"}}};
    const QString single = dir.path() + "/tiny.safetensors";
    const Result convert = run({"model", "convert", model, "-o", single});
    QVERIFY2(convert.code == 0 && convert.out.contains("368 tensors"), qPrintable(convert.out + convert.err));
    const Result single_info = run({"model", "info", single});
    QVERIFY2(single_info.out.contains("single-file Stable Diffusion 1.x checkpoint") &&
                 single_info.out.contains("unet  UNet2DConditionModel  792964 parameters  (config inferred from shapes)"),
             qPrintable(single_info.out));
    for (const auto& [source, extra] : {std::pair<QString, QStringList>{model, {}}, {single, {"--config", model}}}) {
      for (const auto& c : cases) {
        const QString out = dir.path() + "/" + c.component + ".safetensors";
        const QString in = ref + "/" + c.inputs + ".safetensors";
        const Result r = run(QStringList{"model", "eval", "--model", source, "--component", c.component, "--inputs", in,
                                         "--output", out} + extra);
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const zs::io::SafetensorsReader got(out.toStdString()), want(in.toStdString());
        for (const char* name : c.outputs) {
          const double err = (got.tensor(name) - want.tensor(name)).abs().max().item<double>();
          QVERIFY2(err <= 1e-4, qPrintable(QString("%1 %2: max abs error %3").arg(c.component, name).arg(err)));
        }
      }
    }
    // Tokenizer: the fixture's prompts in, its 77-id frames out.
    std::ifstream cases_file((ref + "/tokenizer_cases.json").toStdString());
    const auto tcases = nlohmann::json::parse(cases_file)["cases"];
    nlohmann::json prompts = nlohmann::json::array();
    for (const auto& c : tcases) prompts.push_back(c["prompt"]);
    const QString prompts_path = dir.path() + "/prompts.json";
    zs::io::write_file_atomic(prompts_path.toStdString(), prompts.dump());
    const Result tok = run({"model", "eval", "--model", model, "--component", "tokenizer", "--inputs", prompts_path, "-o",
                            dir.path() + "/ids.json"});
    QVERIFY2(tok.code == 0, qPrintable(tok.err));
    std::ifstream ids_file((dir.path() + "/ids.json").toStdString());
    const auto ids = nlohmann::json::parse(ids_file)["ids"];
    QCOMPARE(ids.size(), tcases.size());
    for (std::size_t i = 0; i < ids.size(); ++i) QVERIFY(ids[i] == tcases[i]["input_ids"]);
    // What is not there is named.
    const Result missing = run({"model", "info", dir.path()});
    QCOMPARE(missing.code, 1);
    QVERIFY2(missing.err.contains("model_index.json: not found"), qPrintable(missing.err));
    const Result no_tensor = run({"model", "eval", "--model", model, "--component", "unet", "--inputs",
                                  ref + "/vae_io.safetensors", "-o", dir.path() + "/x.safetensors"});
    QCOMPARE(no_tensor.code, 1);
    QVERIFY2(no_tensor.err.contains("no tensor \"sample\" (unet needs it)"), qPrintable(no_tensor.err));
  }

  // `model info` keeps its listing but exits non-zero when a component cannot be read (a missing
  // shard, a broken SentencePiece model), naming each; --help says so (issue 59 item 9).
  void modelInfoFailsOnAnUnreadableComponent() {
    QTemporaryDir dir;
    const QString flux = dir.path() + "/flux", qwen = dir.path() + "/qwen";
    QCOMPARE(QProcess::execute("cp", {"-r", zs::test::peerFixture("flux-tiny"), flux}), 0);
    QCOMPARE(QProcess::execute("cp", {"-r", zs::test::peerFixture("qwen-image-tiny"), qwen}), 0);
    QCOMPARE(run({"model", "info", flux}).code, 0);
    QCOMPARE(run({"model", "info", qwen}).code, 0);
    QVERIFY(QFile::remove(qwen + "/text_encoder/model-00003-of-00005.safetensors"));
    const Result shard = run({"model", "info", qwen});
    QCOMPARE(shard.code, 1);
    QVERIFY2(shard.out.contains("  transformer  diffusers.QwenImageTransformer2DModel") &&
                 shard.out.contains("text_encoder") && shard.out.contains("(unreadable: "), qPrintable(shard.out));
    QVERIFY2(shard.err.contains("1 component could not be read") && shard.err.contains("model-00003-of-00005.safetensors"),
             qPrintable(shard.err));
    {
      QFile spiece(flux + "/tokenizer_2/spiece.model");
      QVERIFY(spiece.open(QIODevice::WriteOnly | QIODevice::Truncate));
      spiece.write("not a protobuf");
    }
    const Result tok = run({"model", "info", flux});
    QCOMPARE(tok.code, 1);
    QVERIFY2(tok.out.contains("tokenizer_2") && tok.err.contains("tokenizer_2: "), qPrintable(tok.out + tok.err));
    QVERIFY(run({"model", "info", "--help"}).out.contains("exits with 1"));
  }

  // export's --help says that it streams (the memory a user must plan for).
  void exportHelpSaysItStreams() {
    const Result r = run({"export", "--help"});
    QVERIFY2(r.out.contains("memory stays near the\nlargest tensor"), qPrintable(r.out));
  }

  void everyCommandHasHelp() {
    QFETCH(QStringList, args);
    QFETCH(QString, usage);
    const Result r = run(args);
    QCOMPARE(r.code, 0);
    QVERIFY2(r.out.startsWith(usage), qPrintable(r.out));
  }

  void badUsageExitsTwo_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown command") << QStringList{"frobnicate"} << "zerostudio: unknown command 'frobnicate'";
    QTest::newRow("unknown option") << QStringList{"--frob"} << "zerostudio: unknown option '--frob'";
    QTest::newRow("unknown subcommand") << QStringList{"config", "bogus"} << "zerostudio: unknown config subcommand 'bogus'";
    QTest::newRow("missing file") << QStringList{"config", "validate"} << "zerostudio: 'zerostudio config validate' needs FILE";
    QTest::newRow("unknown flag") << QStringList{"config", "validate", "x.yaml", "--strict"}
                                  << "zerostudio: unknown option '--strict' for 'zerostudio config validate'";
    QTest::newRow("flag without value") << QStringList{"config", "validate", "x.yaml", "--set"}
                                        << "zerostudio: option '--set' needs a value (KEY=VALUE)";
    QTest::newRow("import without output") << QStringList{"config", "import", "--accelerate", "a.yaml"}
                                           << "zerostudio: 'zerostudio config import' needs -o OUT.yaml";
    QTest::newRow("export without target") << QStringList{"config", "export", "x.yaml"}
                                           << "zerostudio: 'zerostudio config export' needs --accelerate OUT.yaml";
    QTest::newRow("train without file") << QStringList{"train"} << "zerostudio: 'zerostudio train' needs FILE";
    QTest::newRow("dataset kind") << QStringList{"make-dataset", "faces", "--out", "x"}
                                  << "zerostudio: make-dataset: unknown kind 'faces'";
    QTest::newRow("dataset count") << QStringList{"make-dataset", "shapes", "--out", "x", "--count", "many"}
                                   << "zerostudio: --count needs a whole number, got 'many'";
    QTest::newRow("export format") << QStringList{"export", "ckpt", "--format", "ckpt", "-o", "x"}
                                   << "zerostudio: --format ckpt is not one of diffusers, single-file, safetensors";
    QTest::newRow("export without output") << QStringList{"export", "ckpt", "--format", "diffusers"}
                                           << "zerostudio: export needs -o OUT";
    QTest::newRow("launch processes") << QStringList{"launch", "--num_processes", "two", quickstart()}
                                      << "zerostudio: --num_processes needs a whole number, got 'two'";
  }

  void badUsageExitsTwo() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const Result r = run(args);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.startsWith(message), qPrintable(r.err));
  }

  void checkpointCommandsNameWhatIsWrong() {
    QTemporaryDir dir;
    const Result none = run({"checkpoints", dir.path() + "/nowhere"});
    QCOMPARE(none.code, 1);
    QVERIFY2(none.err.contains("/nowhere/checkpoints: no checkpoints folder; pass a run directory"), qPrintable(none.err));
    const Result not_ckpt = run({"export", dir.path(), "--format", "diffusers", "-o", dir.path() + "/out"});
    QCOMPARE(not_ckpt.code, 1);
    QVERIFY2(not_ckpt.err.contains("not a checkpoint folder (no meta.json)"), qPrintable(not_ckpt.err));
  }

  void makeDatasetAndTrainErrors() {
    QTemporaryDir dir;
    const Result made = run({"make-dataset", "shapes", "--out", dir.path() + "/shapes", "--count", "5", "--size", "16",
                             "--seed", "3"});
    QCOMPARE(made.code, 0);
    QVERIFY2(made.out.contains("wrote 5 images"), qPrintable(made.out));
    QVERIFY(QFile::exists(dir.path() + "/shapes/images/00004.png"));
    QVERIFY(QFile::exists(dir.path() + "/shapes/captions/00004.txt"));
    // An empty data.path means the run's data/ folder: without images there, training is
    // refused before anything starts, naming the key and the folder (and nothing is created).
    const Result r = run({"train", quickstart(), "--run-dir", dir.path() + "/run", "--set", "data.generate=none"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("data.path: empty, so the dataset is the run's data/ folder, and " + dir.path() +
                            "/run/data does not exist; put your images with captions there"),
             qPrintable(r.err));
    QVERIFY(!QFileInfo::exists(dir.path() + "/run/events.jsonl"));
    // A preset that is only estimated is refused the same way; launch refuses before any rank starts.
    const Result preset = run({"launch", "--num_processes", "2", quickstart(), "--run-dir", dir.path() + "/run4", "--set",
                               "model.preset=sd15"});
    QCOMPARE(preset.code, 1);
    QVERIFY2(preset.err.contains("model.preset: sd15 describes the architecture for estimates only; set model.path"),
             qPrintable(preset.err));
    QVERIFY2(!preset.out.contains("[launcher] starting"), qPrintable(preset.out));
    const Result missing = run({"train", quickstart(), "--run-dir", dir.path() + "/run2", "--set",
                                "data.path=" + dir.path() + "/nothing", "--set", "data.generate=none"});
    QCOMPARE(missing.code, 1);
    QVERIFY2(missing.err.contains("data.path: folder '" + dir.path() + "/nothing' does not exist; choose the dataset folder"), qPrintable(missing.err));
    const Result resume = run({"train", quickstart(), "--run-dir", dir.path() + "/run3", "--resume", "latest"});
    QCOMPARE(resume.code, 1);
    QVERIFY2(resume.err.contains("no checkpoint to resume from"), qPrintable(resume.err));
  }

  // Every command and key that takes a folder accepts it with a trailing slash (as shell
  // completion writes it), relative to the working folder or absolute.
  void foldersWithATrailingSlash_data() {
    QTest::addColumn<bool>("absolute");
    QTest::newRow("relative/") << false;
    QTest::newRow("absolute/") << true;
  }

  void foldersWithATrailingSlash() {
    QFETCH(bool, absolute);
    QTemporaryDir dir;
    const QString cwd = dir.path();
    const auto folder = [&](const QString& name) { return (absolute ? cwd + "/" : QString()) + name + "/"; };
    const auto small = [](int steps) {
      return QStringList{"--set", "training.max_steps=" + QString::number(steps), "--set", "training.batch_size=4", "--set",
                         "sampling.prompts=[]", "--set", "checkpointing.every_n_steps=2", "--set", "data.generate=none"};
    };
    zs::test::FailureReport report(cwd + "/run");
    Result r = run({"make-dataset", "shapes", "--out", folder("ds"), "--count", "8", "--size", "16"}, cwd);
    QVERIFY2(r.code == 0 && QFileInfo::exists(cwd + "/ds/images/00007.png"), qPrintable(r.err));
    r = run(QStringList{"train", quickstart(), "--run-dir", folder("run"), "--set", "data.path=" + folder("ds"), "--set",
                        "logging.runs_root=" + folder("runs"), "--set", "data.latent_cache_dir=" + folder("cache")} +
                small(2),
            cwd);
    report.setOutput("train", r.err);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(QFileInfo::exists(cwd + "/run/checkpoints/step_2/meta.json"));
    r = run({"checkpoints", folder("run")}, cwd);
    QVERIFY2(r.code == 0 && r.out.contains("step_2"), qPrintable(r.out + r.err));
    r = run({"export", folder("run/checkpoints/step_2"), "--format", "diffusers", "-o", folder("out")}, cwd);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(QFileInfo::exists(cwd + "/out/unet/config.json"));
    if (zs::test::sharedAvailable()) {  // a diffusers folder (absolute: the fixture's)
      r = run({"model", "info", zs::test::sharedDir() + "/fixtures/sd15-tiny/"}, cwd);
      QVERIFY2(r.code == 0, qPrintable(r.err));
    }
    // --resume with a checkpoint folder: the run is the folder's, whatever the slash.
    r = run(QStringList{"train", quickstart(), "--resume", folder("run/checkpoints/step_2"), "--set",
                        "data.path=" + folder("ds")} + small(3),
            cwd);
    report.setOutput("resume", r.err);
    QVERIFY2(r.code == 0 && r.out.contains("finished at step 3"), qPrintable(r.out + r.err));
    QVERIFY(QFileInfo::exists(cwd + "/run/checkpoints/step_3/meta.json"));
  }

  void validateGoodAndBadFiles() {
    const Result good = run({"config", "validate", quickstart()});
    QCOMPARE(good.code, 0);
    QVERIFY(good.out.contains("quickstart.yaml: valid"));

    QTemporaryDir dir;
    QFile bad(dir.path() + "/bad.yaml");
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("zero:\n  stage: 2\n  offload_param:\n    device: cpu\ntraining:\n  max_stepz: 3\n");
    bad.close();
    const Result r = run({"config", "validate", bad.fileName()});
    QCOMPARE(r.code, 1);
    const QStringList lines = r.err.trimmed().split('\n');
    QCOMPARE(lines.size(), 2);
    QVERIFY2(lines[0].startsWith("error: " + bad.fileName() + ":4:13: zero.offload_param.device: parameter offload"),
             qPrintable(r.err));
    QVERIFY(lines[1].startsWith("error: " + bad.fileName() + ":6:3: training.max_stepz: unknown key; did you mean"));

    const Result missing = run({"config", "validate", dir.path() + "/nope.yaml"});
    QCOMPARE(missing.code, 1);
    QVERIFY(missing.err.startsWith("error: " + dir.path() + "/nope.yaml: cannot open"));
  }

  // Every shipped config is valid (exit 0); what the Stable Diffusion ones still need before
  // they train (a model folder, images) is said as warnings naming the keys.
  void shippedConfigsValidate_data() {
    QTest::addColumn<QString>("file");
    for (const QString& f : QDir(zs::test::sourceDir() + "/configs").entryList({"*.yaml"}, QDir::Files))
      QTest::newRow(qPrintable(f)) << zs::test::sourceDir() + "/configs/" + f;
  }

  void shippedConfigsValidate() {
    QFETCH(QString, file);
    const Result r = run({"config", "validate", file});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(r.out.contains(": valid"));
    if (QFileInfo(file).fileName().startsWith("quickstart")) {  // every quickstart trains as shipped
      QVERIFY2(!r.err.contains("needed before training"), qPrintable(r.err));
    } else {
      QVERIFY2(r.err.contains("model.path: 'models/") && r.err.contains("does not exist yet"), qPrintable(r.err));
      QVERIFY2(r.err.contains("data.path: empty: the run reads its images from the run's data/ folder (runs/<run>/data)"),
               qPrintable(r.err));
    }
  }

  // README's way: data.path empty, images with captions in the run's data/ folder.
  void imagesInTheRunsDataFolderTrain() {
    QTemporaryDir dir;
    const QString run_dir = dir.path() + "/run";
    zs::test::FailureReport report(run_dir);
    const Result made = run({"make-dataset", "shapes", "--out", run_dir + "/data", "--count", "16", "--size", "16"});
    QCOMPARE(made.code, 0);
    const Result r = run({"train", quickstart(), "--run-dir", run_dir, "--set", "data.generate=none", "--set",
                          "training.max_steps=2", "--set", "sampling.every_n_steps=0", "--set", "sampling.prompts=[]",
                          "--set", "checkpointing.every_n_steps=0", "--set", "training.batch_size=4"});
    report.setOutput("zerostudio train (stderr)", r.err);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY2(r.err.contains("16 images"), qPrintable(r.err));
    QVERIFY(QFileInfo::exists(run_dir + "/checkpoints/step_2/meta.json"));
  }

  // `zerostudio cache` with two processes fills both caches for every image (flipped too) and
  // caption, says so, does nothing the second time, and a run on those caches trains with the
  // frozen parts off the device (both caches are on by default). With both off it says which
  // keys to set.
  void cacheFillsTheCachesAndTrainingUsesThem() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const QString run_dir = dir.path() + "/run";
    zs::test::FailureReport report(run_dir);
    QCOMPARE(run({"make-dataset", "shapes", "--out", run_dir + "/data", "--count", "6", "--size", "32"}).code, 0);
    const QStringList sets = {"--set", "model.path=" + zs::test::sharedDir() + "/fixtures/sd15-tiny", "--set",
                              "model.prediction_type=epsilon", "--set", "data.generate=none", "--set",
                              "data.resolution=32", "--set", "data.flip_p=0.5", "--set", "data.caption_dropout=0.1",
                              "--set", "data.latent_cache_dir=" + dir.path() + "/cache", "--set", "launch.use_cpu=true"};
    const QStringList cached = {"--set", "data.cache_latents=true", "--set", "data.cache_text_embeddings=true"};
    const Result off = run(QStringList{"cache", quickstart(), "--run-dir", run_dir, "--set", "data.cache_latents=false",
                                       "--set", "data.cache_text_embeddings=false"} + sets);
    QCOMPARE(off.code, 1);
    QVERIFY2(off.err.contains("data.cache_latents and data.cache_text_embeddings are both off"), qPrintable(off.err));
    const Result first = run(QStringList{"cache", quickstart(), "--run-dir", run_dir, "--num_processes", "2"} + sets + cached);
    report.setOutput("zerostudio cache (stderr)", first.err);
    QVERIFY2(first.code == 0, qPrintable(first.err));
    QVERIFY2(first.out.contains("12/12 latents") && first.out.contains("complete:"), qPrintable(first.out));
    QVERIFY2(first.err.contains("[process 1]") && first.err.contains("[process 0]"), qPrintable(first.err));
    const Result again = run(QStringList{"cache", quickstart(), "--run-dir", run_dir} + sets + cached);
    QVERIFY2(again.code == 0 && again.out.contains("this process encoded 0"), qPrintable(again.out + again.err));
    const Result trained = run(QStringList{"train", quickstart(), "--run-dir", run_dir, "--set", "training.max_steps=1",
                                           "--set", "training.batch_size=2", "--set", "sampling.prompts=[]", "--set",
                                           "checkpointing.every_n_steps=0"} + sets + cached);
    report.setOutput("zerostudio train (stderr)", trained.err);
    QVERIFY2(trained.code == 0, qPrintable(trained.err));
    QVERIFY2(trained.err.contains("frozen parts off the device"), qPrintable(trained.err));
  }

  // `zerostudio cache` on a diffusers Z-Image folder (tests/fixtures/z-image-tiny) and a FLUX.2
  // [klein] one (flux2-klein-tiny): Qwen3's prompt states and the VAE's latents go to the caches, and
  // the run on them trains with Qwen3 and the VAE off the device, never loading Qwen3 (issues 54, 55).
  void cacheFillsATransformerPipelinesCachesAndTrainingUsesThem_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("config");
    QTest::addColumn<QStringList>("extra");
    QTest::newRow("Z-Image") << "z-image-tiny" << "quickstart-z-image.yaml" << QStringList{};
    QTest::newRow("FLUX.2 [klein]") << "flux2-klein-tiny" << "quickstart-flux2.yaml"
                                    << QStringList{"--set", "model.max_sequence_length=24"};
  }
  void cacheFillsATransformerPipelinesCachesAndTrainingUsesThem() {
    QFETCH(QString, fixture);
    QFETCH(QString, config);
    QFETCH(QStringList, extra);
    const QString folder = zs::test::peerFixture(fixture);
    if (!QFileInfo::exists(folder)) ZS_SKIP_UNLESS_CI(qPrintable("tests/fixtures/" + fixture + " is absent"));
    QTemporaryDir dir;
    const QString run_dir = dir.path() + "/run";
    zs::test::FailureReport report(run_dir);
    QCOMPARE(run({"make-dataset", "shapes", "--out", run_dir + "/data", "--count", "4", "--size", "16"}).code, 0);
    const QString file = zs::test::sourceDir() + "/configs/" + config;
    const QStringList sets = QStringList{"--set", "model.path=" + folder, "--set", "data.generate=none", "--set",
                                         "data.resolution=16", "--set", "data.flip_p=0", "--set", "data.caption_dropout=0",
                                         "--set", "data.latent_cache_dir=" + dir.path() + "/cache", "--set",
                                         "data.cache_latents=true", "--set", "data.cache_text_embeddings=true"} + extra;
    const Result first = run(QStringList{"cache", file, "--run-dir", run_dir} + sets);
    report.setOutput("zerostudio cache (stderr)", first.err);
    QVERIFY2(first.code == 0, qPrintable(first.err));
    QVERIFY2(first.out.contains("4/4 latents") && first.out.contains("complete:"), qPrintable(first.out));
    const Result trained = run(QStringList{"train", file, "--run-dir", run_dir, "--set", "training.max_steps=1",
                                           "--set", "training.batch_size=2", "--set", "sampling.prompts=[]", "--set",
                                           "checkpointing.every_n_steps=0"} + sets);
    report.setOutput("zerostudio train (stderr)", trained.err);
    QVERIFY2(trained.code == 0, qPrintable(trained.err));
    QVERIFY2(trained.err.contains("frozen parts off the device"), qPrintable(trained.err));
  }

  // A model whose files cannot be read (here a truncated UNet file) is refused by train, launch
  // and cache before anything is created — no run folder, no cache — naming the file; `config
  // validate` names it too (issue 59 item 11).
  void refusedModelLeavesNothingBehind() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const QString model = dir.path() + "/model", runs = dir.path() + "/runs", cache = dir.path() + "/cache";
    QCOMPARE(QProcess::execute("cp", {"-r", zs::test::sharedDir() + "/fixtures/sd15-tiny", model}), 0);
    const QString weights = model + "/unet/diffusion_pytorch_model.safetensors";
    QVERIFY(QFile::resize(weights, QFileInfo(weights).size() - 100));
    const QStringList sets = {"--set", "model.path=" + model, "--set", "model.prediction_type=epsilon", "--set",
                              "data.resolution=32", "--set", "logging.runs_root=" + runs, "--set", "logging.run_name=broken",
                              "--set", "data.latent_cache_dir=" + cache, "--set", "launch.use_cpu=true", "--set",
                              "data.cache_latents=true", "--set", "data.cache_text_embeddings=true"};
    const QList<QStringList> commands = {{"train", quickstart()},
                                         {"launch", "--num_processes", "2", quickstart()},
                                         {"cache", quickstart()}};
    for (const QStringList& command : commands) {
      const Result r = run(command + sets);
      const QString what = command[0] + ": " + r.err;
      QVERIFY2(r.code == 1, qPrintable(what));
      QVERIFY2(r.err.contains("model.path") && r.err.contains("unet/diffusion_pytorch_model.safetensors") &&
                   r.err.contains("truncated") && r.err.contains("zerostudio model info"),
               qPrintable(what));
      QVERIFY2(!QFileInfo::exists(runs) && !QFileInfo::exists(cache), qPrintable(what));
    }
    const Result validated = run(QStringList{"config", "validate", quickstart()} + sets);
    QVERIFY2(validated.err.contains("unet/diffusion_pytorch_model.safetensors"), qPrintable(validated.out + validated.err));
  }

  // A path the system refuses (a name longer than the filesystem allows) is an error naming the
  // path and the system's reason, not an "unexpected failure" to report (issue 59 item 7).
  void aRefusedPathIsNamed() {
    QTemporaryDir dir;
    const QString longName = dir.path() + "/" + QString(300, 'a');
    for (const QStringList& command : {QStringList{"model", "info", longName},
                                       QStringList{"train", quickstart(), "--run-dir", longName, "--set", "training.max_steps=1"}}) {
      const Result r = run(command);
      const QString what = command.join(' ').left(40) + ": " + r.err;
      QCOMPARE(r.code, 1);
      QVERIFY2(r.err.contains("File name too long") && r.err.contains(QString(300, 'a')), qPrintable(what));
      QVERIFY2(!r.err.contains("unexpected failure"), qPrintable(what));
    }
  }

  void overridesAndPrint() {
    const Result r = run({"config", "validate", quickstart(), "--set", "zero.stage=3", "--set=training.max_steps=20", "--print"});
    QCOMPARE(r.code, 0);
    // The warning points at the quickstart's own warmup_steps line.
    int line = 0;
    QFile q(quickstart());
    QVERIFY(q.open(QIODevice::ReadOnly));
    for (int n = 1; !q.atEnd(); ++n)
      if (q.readLine().trimmed().startsWith("warmup_steps:")) line = n;
    QVERIFY2(r.err.contains(QString("quickstart.yaml:%1:17: scheduler.warmup_steps: warmup (100 steps) is not shorter").arg(line)),
             qPrintable(r.err));
    QVERIFY(r.out.contains("zero:\n  stage: 3\n"));
    QVERIFY(r.out.contains("  max_steps: 20\n"));
    const Result bad = run({"config", "validate", quickstart(), "--set", "zero.stage=9"});
    QCOMPARE(bad.code, 1);
    QCOMPARE(bad.err.trimmed(), QString("error: --set zero.stage=9: zero.stage: must be between 0 and 3 (got 9)"));
  }

  void flagsAcceptHyphensAndUnderscores() {
    using namespace zs::cli;
    const CommandSpec spec{"launch", "FILE", "test", "", {{"num_processes", "N", "ranks"}, {"use_cpu", "", "cpu"}}, 1, 1};
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--num_processes", "2", "--use_cpu", "f.yaml"},
          std::vector<std::string>{"--num-processes=2", "--use-cpu", "f.yaml"},
          std::vector<std::string>{"f.yaml", "--num-processes", "2", "--use_cpu"}}) {
      const ParsedArgs parsed = parse_args(spec, args);
      QCOMPARE(parsed.get("num_processes"), std::string("2"));
      QVERIFY(parsed.has("use_cpu"));
      QCOMPARE(parsed.positional(), std::vector<std::string>{"f.yaml"});
    }
    QVERIFY_THROWS_EXCEPTION(UsageError, parse_args(spec, {"--use-cpu=yes", "f.yaml"}));
    QVERIFY_THROWS_EXCEPTION(UsageError, parse_args(spec, {"--num_processes", "1", "--num-processes", "2", "f.yaml"}));
    QVERIFY_THROWS_EXCEPTION(UsageError, parse_args(spec, {"a.yaml", "b.yaml"}));
  }

  void importSeedsAndExportRoundTrip() {
    QTemporaryDir dir;
    const QString out = dir.path() + "/imported.yaml";
    const Result imp = run({"config", "import", "--accelerate", seed("diffsynth_zero3_cpuoffload.yaml"), "--deepspeed",
                            seed("ds_z3_cpuoffload.json"), "-o", out});
    QCOMPARE(imp.code, 0);
    QVERIFY(imp.err.contains("warning: "));
    QVERIFY(imp.err.contains("wall_clock_breakdown"));
    QVERIFY(QFile::exists(out));
    const Result shown = run({"config", "validate", out, "--print"});
    QCOMPARE(shown.code, 0);
    QVERIFY(shown.out.contains("  stage: 3\n"));

    const QString acc = dir.path() + "/acc.yaml", ds = dir.path() + "/ds.json";
    QCOMPARE(run({"config", "export", out, "--accelerate", acc, "--deepspeed", ds}).code, 0);
    QFile accFile(acc);
    QVERIFY(accFile.open(QIODevice::ReadOnly));
    QVERIFY(QString::fromUtf8(accFile.readAll()).contains("deepspeed_config_file: ds.json"));
    // Import from another folder: ds.json resolves beside the YAML.
    const QString again = dir.path() + "/again.yaml";
    const Result back = run({"config", "import", "--accelerate", acc, "--config", out, "-o", again}, QDir::tempPath());
    QCOMPARE(back.code, 0);
    QCOMPARE(run({"config", "validate", again, "--print"}).out, shown.out);

    const Result conflict = run({"config", "import", "--accelerate", seed("simpletuner_accelerate.yaml"), "--deepspeed",
                                 seed("zero2_offload.json"), "-o", dir.path() + "/x.yaml"});
    QCOMPARE(conflict.code, 1);
    QVERIFY2(conflict.err.contains("deepspeed_config.zero_stage: conflicts with the DeepSpeed config file"), qPrintable(conflict.err));
    QVERIFY(conflict.err.contains("deepspeed_config.gradient_accumulation_steps: conflicts"));
    QVERIFY(conflict.err.contains("mixed_precision: conflicts"));
    QVERIFY(!QFile::exists(dir.path() + "/x.yaml"));
  }

  void schemaMarkdownIsTheDoc() {
    const Result r = run({"config", "schema", "--markdown"});
    QCOMPARE(r.code, 0);
    QFile doc(zs::test::sourceDir() + "/docs/CONFIG.md");
    QVERIFY(doc.open(QIODevice::ReadOnly));
    QCOMPARE(r.out, QString::fromUtf8(doc.readAll()));
    const Result text = run({"config", "schema"});
    QCOMPARE(text.code, 0);
    QVERIFY(text.out.contains("zero.offload_param.device  (one of `none`, `cpu`, `nvme`, default none)"));
  }
};

ZS_TEST_MAIN(TestCli);
#include "tst_cli.moc"
