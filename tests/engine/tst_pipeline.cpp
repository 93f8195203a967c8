// Diffusers pipeline folders: components from model_index.json, weights from one file, from
// shards named by an index, or from the fp16 variant; clear errors for what is missing. Single-file
// checkpoints (SD 1.x and SDXL): names both ways, configs inferred from shapes, the fixture's
// reference outputs reproduced from one.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/embedding.h>

#include "checkpoint/export.h"
#include "config/config_loader.h"
#include "core/cpu_allocation_counter.h"
#include "core/error.h"
#include "data/latent_cache.h"
#include "estimate/memory_estimator.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/model_shape.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/sd_export.h"
#include "models/sd/single_file_model.h"
#include "models/sd/single_file_names.h"
#include "settings/trainer_config.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs::models;

namespace {
QString fixtureDir() { return zs::test::sharedDir() + "/fixtures/sd15-tiny"; }

/// Copies the fixture folder to `dir`, leaving out `skip` (a relative path).
void copy_fixture(const QString& dir, const QString& skip = {}) {
  for (const QString& comp : QDir(fixtureDir()).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    QDir().mkpath(dir + "/" + comp);
    for (const QString& f : QDir(fixtureDir() + "/" + comp).entryList(QDir::Files))
      if (comp + "/" + f != skip) QFile::copy(fixtureDir() + "/" + comp + "/" + f, dir + "/" + comp + "/" + f);
  }
  QFile::copy(fixtureDir() + "/model_index.json", dir + "/model_index.json");
}

at::Tensor unet_out(const ModelSource& p) {
  const zs::io::SafetensorsReader ref((zs::test::sharedDir() + "/fixtures/sd15-tiny-reference/unet_io.safetensors").toStdString());
  auto unet = p.load_unet();
  c10::NoGradGuard no_grad;
  return unet->forward(ref.tensor("sample"), ref.tensor("timestep"), ref.tensor("encoder_hidden_states"));
}
/// SDXL's second text encoder: OpenCLIP ViT-bigG/14 with its projection.
ClipTextConfig open_clip_big_g() { return zs::test::open_clip_config(1280, 32, 1280); }

using Shapes = std::map<std::string, std::vector<std::int64_t>>;

/// The single-file names and shapes of Stable Diffusion 1.5 or SDXL base at full size, from
/// modules built with the Meta dispatch key included, which skips their initialisation (their
/// memory is never touched; only names and shapes are read).
Shapes standard_single_file(bool xl) {
  const zs::test::MetaTensorScope meta;
  Shapes out;
  auto shapes_of = [](const torch::nn::Module& m, std::vector<std::string>& names) {
    Shapes s;
    for (const auto& p : m.named_parameters()) {
      names.push_back(p.key());
      s[p.key()] = p.value().sizes().vec();
    }
    return s;
  };
  const UNetConfig uc = xl ? UNetConfig::sdxl() : UNetConfig::sd15();
  std::vector<std::string> names;
  Shapes s = shapes_of(*UNet2DConditionModel(uc), names);
  for (const auto& [d, l] : single_file_unet_names(names, static_cast<int>(uc.layers_per_block))) out[kSingleFileUNet + l] = s[d];
  names.clear();
  s = shapes_of(*AutoencoderKL(AutoencoderKLConfig{}), names);
  for (const auto& [d, l] : single_file_vae_names(names, 4)) {
    auto shape = s[d];
    if (single_file_vae_is_conv(l) && shape.size() == 2) shape = {shape[0], shape[1], 1, 1};
    out[kSingleFileVae + l] = shape;
  }
  names.clear();
  for (const auto& [name, shape] : shapes_of(*ClipTextModel(ClipTextConfig{}), names))
    out[(xl ? kSingleFileXLTextEncoder : kSingleFileTextEncoder) + name] = shape;
  if (!xl) return out;
  names.clear();
  s = shapes_of(*ClipTextModel(open_clip_big_g()), names);
  for (const auto& t : open_clip_text_names(names)) {
    auto shape = s[t.parts[0]];
    shape[0] *= static_cast<std::int64_t>(t.parts.size());
    if (t.transposed) std::swap(shape[0], shape[1]);
    out[kSingleFileXLTextEncoder2 + t.name] = shape;
  }
  return out;
}
}  // namespace

class TestPipeline : public QObject {
  Q_OBJECT

 private slots:
  // Modules built under MetaTensorScope are meta tensors and reserve nothing: with the Meta key
  // merely included, factory functions still reserved CPU memory (untouched) for every tensor, so
  // a full-size shape (the estimator's T5-XXL, Qwen2.5-VL) reserved tens of GB of address space —
  // refused where overcommit is strict, and seconds under the fuzzer's sanitizers.
  void metaScopeReservesNothing() {
    {
      const zs::test::MetaTensorScope meta;
      const torch::nn::Embedding huge(std::int64_t{1} << 24, std::int64_t{1} << 14);  // 1 TiB in float32
      QVERIFY(huge->weight.is_meta());
      QCOMPARE(huge->weight.sizes().vec(), (std::vector<std::int64_t>{std::int64_t{1} << 24, std::int64_t{1} << 14}));
      QVERIFY((huge->weight * 2).is_meta());
    }
    // The thread's dispatch keys are back: new tensors are CPU tensors with values.
    const at::Tensor after = at::ones({3});
    QVERIFY(after.device().is_cpu());
    QCOMPARE(after.sum().item<double>(), 3.0);
  }

  void componentsOfTheFixture() {
    ZS_REQUIRE_SHARED();
    const auto p = DiffusersPipeline::open(fixtureDir().toStdString());
    QCOMPARE(QString::fromStdString(p.class_name()), QString("StableDiffusionPipeline"));
    QCOMPARE(p.components().size(), std::size_t{5});  // safety_checker and feature_extractor are [null, null]
    QVERIFY(p.has("vae") && p.has("tokenizer") && !p.has("safety_checker"));
    QCOMPARE(p.load_tokenizer().vocab_size(), std::size_t{49408});
    QCOMPARE(p.load_scheduler().beta_schedule, std::string("scaled_linear"));
  }

  // The same UNet from shards listed in an index, and from an fp16 variant (to fp16 precision).
  void shardedAndFp16WeightsLoad() {
    ZS_REQUIRE_SHARED();
    const auto plain = DiffusersPipeline::open(fixtureDir().toStdString());
    const at::Tensor want = unet_out(plain);
    QTemporaryDir dir;
    copy_fixture(dir.path(), "unet/diffusion_pytorch_model.safetensors");
    const zs::io::SafetensorsReader src(plain.weight_files("unet")[0]);
    std::vector<std::pair<std::string, at::Tensor>> a, b;
    nlohmann::json map = nlohmann::json::object();
    for (std::size_t i = 0; i < src.entries().size(); ++i) {
      const std::string& name = src.entries()[i].name;
      const bool first = i % 2 == 0;
      (first ? a : b).emplace_back(name, src.tensor(name));
      map[name] = first ? "diffusion_pytorch_model-00001-of-00002.safetensors" : "diffusion_pytorch_model-00002-of-00002.safetensors";
    }
    const std::string unet_dir = (dir.path() + "/unet/").toStdString();
    zs::io::write_safetensors(unet_dir + "diffusion_pytorch_model-00001-of-00002.safetensors", a);
    zs::io::write_safetensors(unet_dir + "diffusion_pytorch_model-00002-of-00002.safetensors", b);
    zs::io::write_file_atomic(unet_dir + "diffusion_pytorch_model.safetensors.index.json",
                              nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
    const auto sharded = DiffusersPipeline::open(dir.path().toStdString());
    QCOMPARE(sharded.weight_files("unet").size(), std::size_t{2});
    QCOMPARE((unet_out(sharded) - want).abs().max().item<double>(), 0.0);

    QTemporaryDir half;
    copy_fixture(half.path(), "unet/diffusion_pytorch_model.safetensors");
    std::vector<std::pair<std::string, at::Tensor>> h;
    for (const auto& e : src.entries()) h.emplace_back(e.name, src.tensor(e.name).to(at::kHalf));
    zs::io::write_safetensors((half.path() + "/unet/diffusion_pytorch_model.fp16.safetensors").toStdString(), h);
    const auto fp16 = DiffusersPipeline::open(half.path().toStdString());
    QVERIFY(QString::fromStdString(fp16.weight_files("unet")[0]).endsWith("diffusion_pytorch_model.fp16.safetensors"));
    const double err = (unet_out(fp16) - want).abs().max().item<double>();
    QVERIFY2(err < 5e-3, qPrintable(QString::number(err)));
  }

  void missingPiecesAreNamed() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    try {
      DiffusersPipeline::open(dir.path().toStdString());
      QFAIL("opened a folder without model_index.json");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("model_index.json: not found"), e.what());
    }
    copy_fixture(dir.path(), "vae/diffusion_pytorch_model.safetensors");
    QFile bin(dir.path() + "/vae/diffusion_pytorch_model.bin");
    QVERIFY(bin.open(QIODevice::WriteOnly));
    bin.close();
    const auto p = DiffusersPipeline::open(dir.path().toStdString());
    try {
      p.load_vae();
      QFAIL("loaded a VAE without safetensors");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("only PyTorch .bin weights found"), e.what());
    }
  }

  // The fixture pipeline as one single file in the original layout, read back: every reference
  // output of diffusers and transformers is reproduced from it (configs from the companion
  // folder, since the fixture's group norm and heads are not Stable Diffusion's standard ones),
  // and what the shapes tell is inferred without it.
  void singleFileOfTheFixtureReproducesTheReference() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string file = (dir.path() + "/tiny.safetensors").toStdString();
    const auto r = zs::checkpoint::convert_to_single_file(fixtureDir().toStdString(), file, {});
    QCOMPARE(r.tensors, std::size_t{368});
    const SingleFileModel bare = SingleFileModel::open(file);
    QCOMPARE(QString::fromStdString(bare.info().family), QString("sd1"));
    const UNetConfig& u = bare.info().unet;
    QCOMPARE(u.block_out_channels, (std::vector<std::int64_t>{32, 64}));
    QCOMPARE(u.layers_per_block, std::int64_t{1});
    QCOMPARE(u.cross_attention_dim, std::int64_t{32});
    QCOMPARE(u.down_block_types, (std::vector<std::string>{"CrossAttnDownBlock2D", "DownBlock2D"}));
    QCOMPARE(u.up_block_types, (std::vector<std::string>{"UpBlock2D", "CrossAttnUpBlock2D"}));
    QVERIFY(!u.use_linear_projection && u.addition_embed_type.empty());
    QCOMPARE(bare.info().vae.block_out_channels, (std::vector<std::int64_t>{32, 64}));
    QCOMPARE(bare.info().vae.latent_channels, std::int64_t{4});
    QCOMPARE(bare.info().text_encoder.hidden_size, std::int64_t{32});
    QCOMPARE(bare.info().text_encoder.num_hidden_layers, std::int64_t{2});
    QCOMPARE(bare.parameter_counts().at("unet"), std::int64_t{792'964});
    try {
      bare.load_tokenizer("tokenizer");
      QFAIL("a single file without a companion folder gave a tokenizer");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("model.config_path"), e.what());
    }

    const auto source = open_model_source(file, fixtureDir().toStdString());
    const std::string ref = (zs::test::sharedDir() + "/fixtures/sd15-tiny-reference/").toStdString();
    const zs::io::SafetensorsReader unet_io(ref + "unet_io.safetensors"), vae_io(ref + "vae_io.safetensors"),
        text_io(ref + "text_io.safetensors");
    auto err = [](const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); };
    QVERIFY(err(unet_out(*source), unet_io.tensor("out")) <= 1e-4);
    c10::NoGradGuard no_grad;
    auto vae = source->load_vae();
    const auto posterior = vae->encode(vae_io.tensor("image"));
    QVERIFY(err(posterior.mean, vae_io.tensor("posterior_mean")) <= 1e-4);
    QVERIFY(err(posterior.logvar, vae_io.tensor("posterior_logvar")) <= 1e-4);
    QVERIFY(err(vae->decode(vae_io.tensor("latent")), vae_io.tensor("decoded")) <= 1e-4);
    const auto text = source->load_text_encoder("text_encoder")->forward(text_io.tensor("input_ids"));
    QVERIFY(err(text.last_hidden_state, text_io.tensor("last_hidden_state")) <= 1e-4);
    QCOMPARE(source->load_tokenizer("tokenizer").vocab_size(), std::size_t{49408});
  }

  // Frozen parts off the device (an SDXL-type pipeline: VAE and two text encoders). On the CPU
  // "off" means released, which the allocation counter sees: the weights' bytes come back to
  // the allocator. Remembered prompts need no encoder; anything else brings a part back for
  // one call (counted) and gives the same values as before; the weights are read again in the
  // dtype they had (bf16 here).
  void frozenPartsLeaveAndComeBack() {
    QTemporaryDir dir;
    const std::string pipeline = (dir.path() + "/tiny-sdxl").toStdString();
    zs::test::write_tiny_sdxl(pipeline);
    zs::CpuAllocationCounter counter;  // it sees only what is allocated while it exists
    DiffusionModel m = DiffusionModel::load_frozen(pipeline);
    m.frozen_to(at::kBFloat16);
    m.train(false);
    const at::Tensor latents = at::randn({1, 4, 8, 8});
    const TextConditioning prompt = m.condition({"a red fox"}, at::kCPU), other = m.condition({"a blue bird"}, at::kCPU);
    const at::Tensor image = m.to_images(latents);
    const std::int64_t bytes = m.frozen_bytes();
    QVERIFY(bytes > 0);
    const std::int64_t before = counter.current();
    m.park_frozen(at::kCPU, {"a red fox", ""});
    const std::int64_t freed = before - counter.current();
    qInfo("frozen weights %lld bytes; parking freed %lld", static_cast<long long>(bytes), static_cast<long long>(freed));
    QVERIFY(m.frozen_parked());
    QVERIFY2(freed >= bytes * 95 / 100, qPrintable(QString::number(freed)));
    QCOMPARE(m.frozen_bytes(), std::int64_t{0});
    // The estimator's frozen bytes for this pipeline in bf16 (its VAE upcast to fp32 or not, as
    // its config says): what parking took off, within 10 %.
    zs::config::TrainerConfig cfg =
        zs::config::load_config_string("version: 1\n", "frozen", {"model.path=" + pipeline, "precision=bf16"}).config;
    zs::estimate::EstimateOptions eo = zs::estimate::options_from_config(cfg);
    eo.frozen_off_device = false;
    const std::int64_t estimated = zs::estimate::estimate_memory(zs::models::model_shape(cfg), eo).gpu_frozen;
    qInfo("estimated frozen bytes %lld", static_cast<long long>(estimated));
    QVERIFY2(std::abs(static_cast<double>(freed) / static_cast<double>(estimated) - 1) <= 0.10, qPrintable(QString::number(estimated)));
    const TextConditioning remembered = m.condition({"a red fox", "a red fox"}, at::kCPU);
    QCOMPARE(m.frozen_visits(), std::int64_t{0});
    QVERIFY(at::equal(remembered.context[1], prompt.context[0]) && at::equal(remembered.pooled[0], prompt.pooled[0]));
    QVERIFY(at::equal(m.condition({"a blue bird"}, at::kCPU).context, other.context));
    QCOMPARE(m.frozen_visits(), std::int64_t{1});
    QVERIFY(at::equal(m.to_images(latents), image));
    QCOMPARE(m.frozen_visits(), std::int64_t{2});
    QCOMPARE(m.frozen_bytes(), std::int64_t{0});  // gone again after each visit
  }

  // SDXL both ways: a pipeline written as a single file has OpenCLIP's names and layouts for
  // encoder 2 (q, k, v fused into in_proj, the projection transposed), CLIP-L under embedders.0
  // and label_emb for the UNet's add_embedding; read back with nothing but a vocabulary folder,
  // its configs are inferred exactly and every weight comes back bit for bit.
  void sdxlSingleFileBothWays() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string pipeline = (dir.path() + "/tiny-sdxl").toStdString();
    zs::test::write_tiny_sdxl(pipeline);
    const std::string file = (dir.path() + "/tiny-sdxl.safetensors").toStdString();
    zs::checkpoint::convert_to_single_file(pipeline, file, {});
    const zs::io::SafetensorsReader st(file), te2(pipeline + "/text_encoder_2/model.safetensors");
    const std::string oc = kSingleFileXLTextEncoder2;
    const std::string layer = "text_model.encoder.layers.1.self_attn.";
    QVERIFY(at::equal(st.tensor(oc + "transformer.resblocks.1.attn.in_proj_weight"),
                      at::cat({te2.tensor(layer + "q_proj.weight"), te2.tensor(layer + "k_proj.weight"), te2.tensor(layer + "v_proj.weight")})));
    QVERIFY(at::equal(st.tensor(oc + "transformer.resblocks.1.attn.in_proj_bias"),
                      at::cat({te2.tensor(layer + "q_proj.bias"), te2.tensor(layer + "k_proj.bias"), te2.tensor(layer + "v_proj.bias")})));
    QVERIFY(at::equal(st.tensor(oc + "text_projection"), te2.tensor("text_projection.weight").t()));
    QVERIFY(at::equal(st.tensor(oc + "positional_embedding"), te2.tensor("text_model.embeddings.position_embedding.weight")));
    QVERIFY(at::equal(st.tensor(oc + "transformer.resblocks.2.mlp.c_proj.weight"), te2.tensor("text_model.encoder.layers.2.mlp.fc2.weight")));
    QVERIFY(st.contains(oc + "ln_final.bias") && st.contains(oc + "transformer.resblocks.0.ln_2.weight"));
    QVERIFY(st.contains(std::string(kSingleFileXLTextEncoder) + "text_model.final_layer_norm.weight"));
    QVERIFY(st.contains("model.diffusion_model.label_emb.0.2.bias"));
    QCOMPARE(st.tensor("first_stage_model.decoder.mid.attn_1.k.weight").dim(), std::int64_t{4});

    // Only a vocabulary beside it: everything else from the file.
    const std::string vocab = (dir.path() + "/vocab").toStdString();
    QDir().mkpath(QString::fromStdString(vocab));
    for (const char* f : {"vocab.json", "merges.txt"})
      QFile::copy(fixtureDir() + "/tokenizer/" + f, QString::fromStdString(vocab + "/" + f));
    const SingleFileModel single = SingleFileModel::open(file, vocab);
    const auto& info = single.info();
    QCOMPARE(QString::fromStdString(info.family), QString("sdxl"));
    const auto same_json = [](const nlohmann::json& a, const nlohmann::json& b) {
      QVERIFY2(a == b, (a.dump() + "\n" + b.dump()).c_str());
    };
    same_json(info.unet.to_json(), UNetConfig::from_file(pipeline + "/unet/config.json").to_json());
    same_json(info.vae.to_json(), AutoencoderKLConfig::from_file(pipeline + "/vae/config.json").to_json());
    same_json(info.text_encoder.to_json(), ClipTextConfig::from_file(pipeline + "/text_encoder/config.json").to_json());
    same_json(info.text_encoder_2.to_json(), ClipTextConfig::from_file(pipeline + "/text_encoder_2/config.json").to_json());
    const DiffusionModel a = DiffusionModel::load_pipeline(pipeline, "epsilon");
    DiffusionModel b = DiffusionModel::load_pipeline(file, "epsilon", vocab);
    auto same_weights = [](const torch::nn::Module& x, const torch::nn::Module& y) {
      const auto px = x.named_parameters(), py = y.named_parameters();
      QCOMPARE(px.size(), py.size());
      for (const auto& p : px) QVERIFY2(at::equal(p.value(), py[p.key()]), p.key().c_str());
    };
    same_weights(*a.unet, *b.unet);
    same_weights(*a.vae, *b.vae);
    same_weights(*a.text_encoder, *b.text_encoder);
    same_weights(*a.text_encoder_2, *b.text_encoder_2);
    QCOMPARE(b.clip_tokenizer_2->pad_id(), std::int64_t{0});  // "!", as SDXL's tokenizer_2
    // The estimator counts the same model from either.
    zs::config::TrainerConfig folder_cfg, file_cfg;
    folder_cfg.model.path = pipeline;
    file_cfg.model.path = file;
    file_cfg.model.config_path = vocab;
    const auto from_folder = zs::models::model_shape(folder_cfg), from_file = zs::models::model_shape(file_cfg);
    QCOMPARE(from_file.trainable_parameters(), from_folder.trainable_parameters());
    QCOMPARE(from_file.frozen_parameters, from_folder.frozen_parameters);
    QCOMPARE(from_file.frozen_fp32_parameters, from_folder.frozen_fp32_parameters);
    QCOMPARE(from_file.latent_factor, from_folder.latent_factor);
    QCOMPARE(b.clip_tokenizer->pad_id(), std::int64_t{49407});
    // The text-embedding cache gives what the encoders give, context and pooled, cold and warm.
    {
      zs::data::LatentCache cache((dir.path() + "/cache").toStdString(), zs::data::LatentCache::text_key(file, {"text_encoder"}), "text");
      const std::vector<std::string> captions = {"a red circle", "", "a red circle", "two blue squares"};
      const TextConditioning want = b.condition(captions, at::kCPU);
      for (int pass = 0; pass < 2; ++pass) {
        const TextConditioning got = b.condition(captions, at::kCPU, &cache);
        QVERIFY(at::equal(got.context, want.context) && at::equal(got.pooled, want.pooled));
      }
      QCOMPARE(cache.stored(), std::int64_t{3});  // each distinct caption once (the repeat is read back)
      QCOMPARE(cache.hits(), std::int64_t{5});
    }
  }

  // Real sizes without real files: Stable Diffusion 1.5's and SDXL base's single-file names and
  // shapes give back exactly their standard configs (UNet, VAE, CLIP-L, OpenCLIP bigG).
  void standardConfigsAreInferredAtFullSize() {
    for (const bool xl : {false, true}) {
      const Shapes shapes = standard_single_file(xl);
      QCOMPARE(std::count_if(shapes.begin(), shapes.end(), [](const auto& e) { return e.first.rfind(kSingleFileUNet, 0) == 0; }),
               std::ptrdiff_t{xl ? 1680 : 686});
      const SingleFileInfo info = infer_single_file(shapes, xl ? "sdxl.safetensors" : "sd15.safetensors");
      QCOMPARE(QString::fromStdString(info.family), QString(xl ? "sdxl" : "sd1"));
      AutoencoderKLConfig vae;
      vae.scaling_factor = xl ? 0.13025 : 0.18215;
      vae.sample_size = xl ? 1024 : 512;
      const std::vector<std::pair<nlohmann::json, nlohmann::json>> pairs = {
          {info.unet.to_json(), (xl ? UNetConfig::sdxl() : UNetConfig::sd15()).to_json()},
          {info.vae.to_json(), vae.to_json()},
          {info.text_encoder.to_json(), ClipTextConfig{}.to_json()},
          {xl ? info.text_encoder_2.to_json() : nlohmann::json(), xl ? open_clip_big_g().to_json() : nlohmann::json()}};
      for (const auto& [got, want] : pairs) QVERIFY2(got == want, (got.dump() + "\n" + want.dump()).c_str());
    }
  }

  // Config validation names the key: a single file needs its companion folder; a pickle is refused.
  void singleFileConfigProblemsAreNamed() {
    QTemporaryDir dir;
    const std::string file = (dir.path() + "/model.safetensors").toStdString(), ckpt = (dir.path() + "/model.ckpt").toStdString();
    zs::io::write_safetensors(file, {{"x", at::zeros({1})}});
    zs::io::write_file_atomic(ckpt, "not a pickle");
    auto problems = [](const std::string& path) {
      std::string keys;
      try {
        zs::config::load_config_string("model:\n  path: " + path + "\n", "test.yaml");
      } catch (const zs::config::ConfigError& e) {
        for (const auto& p : e.problems()) keys += p.key + " ";
      }
      return keys;
    };
    QVERIFY2(problems(file).find("model.config_path") != std::string::npos, problems(file).c_str());
    QVERIFY2(problems(ckpt).find("model.path") != std::string::npos, problems(ckpt).c_str());
  }
};

ZS_TEST_MAIN(TestPipeline);
#include "tst_pipeline.moc"
