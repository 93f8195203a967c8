// FLUX.2's parts against the pinned diffusers. The transformer: tests/fixtures/flux2_transformer.safetensors,
// written by tests/fixtures/gen/flux2_transformer.py from diffusers'
// src/diffusers/models/transformers/transformer_flux2.py (Flux2Transformer2DModel, 0.42.1) and
// pipelines/flux2/pipeline_flux2.py (_patchify_latents, _pack_latents, _prepare_latent_ids,
// _prepare_text_ids): a tiny [dev]-shaped model (guidance embedding, 1 double- and 2 single-stream
// blocks, 4 heads × 8, 4 RoPE axes at θ 2000, a 64-channel time sinusoid), its output and every
// gradient, and the same weights without the guidance embedder ([klein]-shaped). The VAE:
// tests/fixtures/flux2_vae.safetensors and flux2_vae_config/ (gen/flux2_vae.py:
// models/autoencoders/autoencoder_kl_flux2.py AutoencoderKLFlux2 with quant convolutions and its
// BatchNorm statistics, which Flux2Pipeline normalizes the 2×2-patchified latents with). [klein]'s
// prompt encoding: tests/fixtures/flux2_text.{json,safetensors} and flux2_text_encoder/
// (gen/flux2_text.py: Flux2KleinPipeline._get_qwen3_prompt_embeds on a tiny 28-layer Qwen3 with the
// Z-Image fixture's Qwen3 tokenizer). [dev]'s text encoder, Mistral's language model:
// tests/fixtures/mistral_text.safetensors and mistral_text_encoder/ (gen/mistral_text.py:
// transformers' MistralForCausalLM, tiny, 31 layers).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <QtTest>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/attention_options.h"
#include "models/autoencoder_kl.h"
#include "models/flux2/flux2_text.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "io/json_file.h"
#include "models/flux2/flux2_transformer.h"
#include "models/weights.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs::models;

namespace {

Flux2Config tiny_flux2(bool guidance) {
  return Flux2Config::from_json(nlohmann::json{{"_class_name", "Flux2Transformer2DModel"},
                                               {"patch_size", 1},
                                               {"in_channels", 12},
                                               {"out_channels", 12},
                                               {"num_layers", 1},
                                               {"num_single_layers", 2},
                                               {"attention_head_dim", 8},
                                               {"num_attention_heads", 4},
                                               {"joint_attention_dim", 20},
                                               {"timestep_guidance_channels", 64},
                                               {"mlp_ratio", 3.0},
                                               {"axes_dims_rope", {2, 2, 2, 2}},
                                               {"rope_theta", 2000},
                                               {"eps", 1e-6},
                                               {"guidance_embeds", guidance}},
                                "tiny");
}

void load_flux2_fixture(Flux2Transformer2DModelImpl& model, const zs::io::SafetensorsReader& ref) {
  load_weights(model, [&](const std::string& name) {
    const std::string key = "weight." + name;
    return ref.contains(key) ? ref.tensor(key) : at::Tensor();
  }, "flux2_transformer.safetensors");
}

double flux2_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

zs::io::SafetensorsReader flux2_fixture() {
  return zs::io::SafetensorsReader(zs::test::peerFixture("flux2_transformer.safetensors").toStdString());
}

}  // namespace

class TestFlux2 : public QObject {
  Q_OBJECT

 private slots:
  // _patchify_latents + _pack_latents is Flux.1's 2×2 packing; the ids are (0, row, col, 0) and
  // (0, 0, 0, i).
  void packingAndIdsAreThePipelines() {
    const auto ref = flux2_fixture();
    const at::Tensor latents = ref.tensor("latents");
    QVERIFY(at::equal(pack_latents_2x2(latents), ref.tensor("hidden")));
    const auto opts = at::TensorOptions().dtype(at::kLong);
    QVERIFY(at::equal(flux2_image_ids(2, 3, opts), ref.tensor("img_ids").to(at::kLong)));
    QVERIFY(at::equal(flux2_text_ids(5, opts), ref.tensor("txt_ids").to(at::kLong)));
  }

  // Against "exact.*" (diffusers with its time sinusoid in float64, as ours): 1e-5 relative to the
  // output's size, 1e-4 on every gradient; against diffusers as it runs: 1e-4. Both attention paths.
  void forwardAndGradientsMatchDiffusers() {
    const auto ref = flux2_fixture();
    for (const AttentionMode mode : {AttentionMode::plain, AttentionMode::blocked}) {
      Flux2Transformer2DModel model(tiny_flux2(true));
      load_flux2_fixture(*model, ref);
      AttentionOptions o;
      o.mode = mode;
      QCOMPARE(set_attention_options(*model, o), std::size_t{3});
      const at::Tensor out = model->forward(ref.tensor("hidden"), ref.tensor("context"), ref.tensor("timestep"),
                                            ref.tensor("img_ids"), ref.tensor("txt_ids"), ref.tensor("guidance"));
      const double scale = std::max(1.0, ref.tensor("exact.output").abs().max().item<double>());
      const double d = flux2_diff(out, ref.tensor("exact.output"));
      QVERIFY2(d <= 1e-5 * scale, qPrintable(QString("output differs by %1 (scale %2)").arg(d).arg(scale)));
      QVERIFY(flux2_diff(out, ref.tensor("output")) <= 1e-4 * scale);
      (out * ref.tensor("w")).sum().backward();
      std::size_t checked = 0;
      for (const auto& p : model->named_parameters()) {
        const at::Tensor want = ref.tensor("exact.grad." + p.key());
        const double s = std::max(1.0, want.abs().max().item<double>());
        const double g = flux2_diff(p.value().grad(), want);
        QVERIFY2(g <= 1e-4 * s, qPrintable(QString::fromStdString(p.key()) + QString(": gradient differs by %1").arg(g)));
        ++checked;
      }
      QCOMPARE(checked, model->named_parameters().size());
    }
  }

  // Without the guidance embedder ([klein]): the fixture's output; every parameter name is
  // diffusers' (the fixture's less the guidance embedder's), and none has a bias.
  void withoutGuidanceIsKleinShaped() {
    const auto ref = flux2_fixture();
    Flux2Transformer2DModel model(tiny_flux2(false));
    load_flux2_fixture(*model, ref);
    c10::NoGradGuard no_grad;
    const at::Tensor out = model->forward(ref.tensor("hidden"), ref.tensor("context"), ref.tensor("timestep"),
                                          ref.tensor("img_ids"), ref.tensor("txt_ids"));
    const double scale = std::max(1.0, out.abs().max().item<double>());
    QVERIFY(flux2_diff(out, ref.tensor("exact.output_klein")) <= 1e-5 * scale);
    QVERIFY(flux2_diff(out, ref.tensor("output_klein")) <= 1e-4 * scale);
    std::size_t n = 0, guidance = 0, weights = 0;
    for (const auto& p : model->named_parameters()) {
      QVERIFY2(ref.contains("weight." + p.key()) && !p.key().ends_with(".bias"), p.key().c_str());
      ++n;
    }
    for (const auto& e : ref.entries()) {
      if (e.name.starts_with("weight.time_guidance_embed.guidance_embedder.")) ++guidance;
      if (e.name.starts_with("weight.")) ++weights;
    }
    QCOMPARE(n + guidance, weights);
  }

  // The ZeRO units: io (embedders, the shared modulations, the output layers), then one per
  // block; every parameter in exactly one; hooks around each block in forward order; checkpointed
  // blocks give the same gradients (the shared modulations reach every block as its aux tensor).
  void unitsHooksAndCheckpointing() {
    const auto ref = flux2_fixture();
    Flux2Config c = tiny_flux2(true);
    c.num_layers = 2;
    Flux2Transformer2DModel model(c);
    const auto units = model->units();
    QCOMPARE(units.size(), std::size_t{5});
    QCOMPARE(units[1].name, std::string("transformer_blocks.0"));
    QCOMPARE(units[4].name, std::string("single_transformer_blocks.1"));
    std::int64_t in_units = 0, total = 0;
    for (const auto& u : units) in_units += u.numel();
    for (const auto& p : model->parameters()) total += p.numel();
    QCOMPARE(in_units, total);
    bool modulation_in_io = false;
    for (const auto& [name, t] : units[0].parameters) {
      QVERIFY2(name.find("_blocks.") == std::string::npos, name.c_str());
      modulation_in_io |= name == "single_stream_modulation.linear.weight";
    }
    QVERIFY(modulation_in_io);
    auto run = [&](bool checkpointing, bool to_cpu, std::shared_ptr<UnitHooks> hooks) {
      model->set_gradient_checkpointing(checkpointing);
      model->set_cpu_checkpointing(to_cpu);
      model->set_unit_hooks(std::move(hooks));
      model->zero_grad();
      const at::Tensor out = model->forward(ref.tensor("hidden"), ref.tensor("context"), ref.tensor("timestep"),
                                            ref.tensor("img_ids"), ref.tensor("txt_ids"), ref.tensor("guidance"));
      (out * ref.tensor("w")).sum().backward();
      std::vector<at::Tensor> grads;
      for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
      return std::make_pair(out.detach(), grads);
    };
    auto recorder = std::make_shared<zs::test::RecordingHooks>();
    const auto plain = run(false, false, recorder);
    const std::vector<std::string> want = {"before 0 6", "before 1 11", "after 1", "before 2 11", "after 2",
                                           "before 3 11", "after 3",    "before 4 11", "after 4", "after 0"};
    QCOMPARE(recorder->calls, want);
    for (const bool to_cpu : {false, true}) {
      const auto again = run(true, to_cpu, nullptr);
      QVERIFY(at::allclose(again.first, plain.first, 1e-6, 1e-6));
      for (std::size_t i = 0; i < plain.second.size(); ++i)
        QVERIFY2(at::allclose(again.second[i], plain.second[i], 1e-5, 1e-6), qPrintable(QString::number(i)));
    }
  }

  // The released transformers' sizes, as diffusers counts them on the meta device.
  void fullSizeParameterCountsAreTheReferences() {
    const zs::MetaTensorScope meta;
    QCOMPARE(parameter_count(*Flux2Transformer2DModel(Flux2Config::klein_4b())), std::int64_t{3'875'544'576});
    QCOMPARE(parameter_count(*Flux2Transformer2DModel(Flux2Config::klein_9b())), std::int64_t{9'078'581'248});
    QCOMPARE(parameter_count(*Flux2Transformer2DModel(Flux2Config::dev())), std::int64_t{32'223'281'152});
  }

  // AutoencoderKLFlux2: its config (32 latent channels by default, the BatchNorm eps), encode and
  // decode as AutoencoderKL with quant convolutions, and the pipelines' latent normalization —
  // patchify 2×2, then (x − running_mean) / sqrt(running_var + eps), and back before decoding.
  void vaeAndLatentNormalizationMatchDiffusers() {
    const zs::io::SafetensorsReader ref(zs::test::peerFixture("flux2_vae.safetensors").toStdString());
    const AutoencoderKLConfig c =
        AutoencoderKLConfig::from_file(zs::test::peerFixture("flux2_vae_config/config.json").toStdString());
    QVERIFY(c.flux2() && c.use_quant_conv && c.use_post_quant_conv);
    QCOMPARE(*c.batch_norm_eps, 1e-4);
    QCOMPARE(c.latent_channels, std::int64_t{8});
    AutoencoderKL vae(c);
    load_weights(*vae, [&](const std::string& name) {
      const std::string key = "weight." + name;
      return ref.contains(key) ? ref.tensor(key) : at::Tensor();
    }, "flux2_vae.safetensors");
    c10::NoGradGuard no_grad;
    auto close = [](const at::Tensor& a, const at::Tensor& b, const char* what) {
      QVERIFY2(a.sizes() == b.sizes(), what);
      const double scale = std::max(1.0, b.abs().max().item<double>()), d = flux2_diff(a, b);
      QVERIFY2(d <= 1e-5 * scale, qPrintable(QString("%1 differs by %2").arg(what).arg(d)));
    };
    const DiagonalGaussian posterior = vae->encode(ref.tensor("image"));
    close(posterior.mean, ref.tensor("mean"), "the posterior's mean");
    close(posterior.logvar, ref.tensor("logvar"), "the posterior's log-variance");
    const at::Tensor normalized = vae->normalize_patched(posterior.mean);
    close(normalized, ref.tensor("normalized"), "the normalized patchified latents");
    QVERIFY(flux2_diff(vae->denormalize_patched(normalized), posterior.mean) < 1e-5);
    close(vae->decode(vae->denormalize_patched(ref.tensor("normalized"))), ref.tensor("decoded"), "the decoded images");
    // Its config round-trips; Flux.1's VAE has no statistics to normalize with.
    const AutoencoderKLConfig again = AutoencoderKLConfig::from_json(c.to_json(), "again");
    QVERIFY(again.flux2() && *again.batch_norm_eps == 1e-4 && again.latent_channels == 8);
    QVERIFY_THROWS_EXCEPTION(zs::Error, AutoencoderKL(AutoencoderKLConfig::flux1())->normalize_patched(posterior.mean));
    const AutoencoderKLConfig defaults = AutoencoderKLConfig::from_json({{"_class_name", "AutoencoderKLFlux2"}}, "defaults");
    QVERIFY(defaults.flux2() && defaults.latent_channels == 32 && defaults.use_quant_conv);
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"patch_size", {1, 1}}, {"decoder_block_out_channels", {96, 192, 384, 384}}, {"batch_norm_eps", -1}}) {
      nlohmann::json j = c.to_json();
      j[key] = value;
      try {
        AutoencoderKLConfig::from_json(j, "vae/config.json");
        QFAIL(key.c_str());
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains("vae/config.json: " + QString::fromStdString(key)), e.what());
      }
    }
  }

  // [klein]'s prompt states: Qwen3's chat template with thinking off (texts and ids as
  // transformers' apply_chat_template), padded to max_sequence_length with the pad token (those
  // rows kept: the transformer attends to them) or cut there, hidden states 9, 18, 27 side by side
  // — within 1e-5 of _get_qwen3_prompt_embeds, resident and streamed; English, Chinese, empty, cut.
  void kleinPromptStatesMatchThePipeline() {
    const nlohmann::json cases = zs::io::read_json_file(zs::test::peerFixture("flux2_text.json").toStdString(), "golden")["cases"];
    const QwenTokenizer tok = QwenTokenizer::load(zs::test::peerFixture("z_image_text_tokenizer").toStdString());
    for (const auto& c : cases) {
      QCOMPARE(flux2_klein_chat_text(c["prompt"].get<std::string>()), c["chat"].get<std::string>());
      QCOMPARE(tok.encode(flux2_klein_chat_text(c["prompt"].get<std::string>())), c["ids"].get<std::vector<std::int64_t>>());
    }
    const std::string dir = zs::test::peerFixture("flux2_text_encoder").toStdString();
    QwenTextModel model = load_qwen_text_model(dir, {dir + "/model.safetensors"});
    QCOMPARE(model->config().num_hidden_layers, std::int64_t{28});
    const zs::io::SafetensorsReader ref(zs::test::peerFixture("flux2_text.safetensors").toStdString());
    c10::NoGradGuard no_grad;
    for (const std::int64_t length : {40, 12}) {
      const at::Tensor want = ref.tensor("prompt" + std::to_string(length));
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const std::string prompt = cases[i]["prompt"].get<std::string>();
        for (const bool streamed : {false, true}) {
          const at::Tensor got = flux2_klein_prompt_states(*model, tok, prompt, length, at::kCPU, streamed);
          const at::Tensor w = want[static_cast<std::int64_t>(i)];
          QVERIFY2(got.sizes() == w.sizes(), qPrintable(QString("prompt %1 at %2: shape").arg(i).arg(length)));
          const double scale = std::max(1.0, w.abs().max().item<double>()), d = flux2_diff(got, w);
          QVERIFY2(d <= 1e-5 * scale, qPrintable(QString("prompt %1 at %2%3: %4 off").arg(i).arg(length)
                                                     .arg(streamed ? " streamed" : "").arg(d)));
        }
      }
    }
    QVERIFY_THROWS_EXCEPTION(zs::Error, flux2_klein_prompt_states(*model, tok, "x", 12, at::kCPU, false, {9, 28}));
  }

  // Mistral's language model (FLUX.2 [dev]'s text encoder) as QwenTextModel's Mistral kind: Qwen3's
  // decoder without q/k norms or biases. Hidden states 10, 20, 30 and the last (final-normed) of a
  // right-padded batch, padded rows included, within 1e-5 of transformers; the config of
  // Mistral-Small-3.x's Mistral3ForConditionalGeneration (text_config) read with its parameter
  // count as transformers counts it; the older "language_model.model." names load the same.
  void mistralHiddenStatesMatchTransformers() {
    const std::string dir = zs::test::peerFixture("mistral_text_encoder").toStdString();
    QwenTextModel model = load_qwen_text_model(dir, {dir + "/model.safetensors"});
    QVERIFY(model->config().kind == QwenTextConfig::Kind::mistral);
    QCOMPARE(model->config().sliding_window, std::int64_t{0});
    QCOMPARE(model->config().head_dim(), std::int64_t{8});
    const zs::io::SafetensorsReader ref(zs::test::peerFixture("mistral_text.safetensors").toStdString());
    const at::Tensor ids = ref.tensor("input_ids"), mask = ref.tensor("attention_mask");
    c10::NoGradGuard no_grad;
    auto check = [&](QwenTextModelImpl& m) {
      const auto states = m.hidden_states(ids, mask, {10, 20, 30, 31});
      const std::vector<std::string> names = {"hidden.10", "hidden.20", "hidden.30", "last"};
      for (std::size_t i = 0; i < names.size(); ++i) {
        const at::Tensor want = ref.tensor(names[i]);
        const double scale = std::max(1.0, want.abs().max().item<double>()), d = flux2_diff(states[i], want);
        QVERIFY2(d <= 1e-5 * scale, qPrintable(QString::fromStdString(names[i]) + QString(" differs by %1").arg(d)));
      }
    };
    check(*model);
    {
      QTemporaryDir tmp;
      const zs::io::SafetensorsReader weights(dir + "/model.safetensors");
      std::vector<std::pair<std::string, at::Tensor>> renamed;
      for (const auto& e : weights.entries())
        if (e.name.starts_with("model.")) renamed.emplace_back("language_model.model." + e.name.substr(6), weights.tensor(e.name));
      const std::string file = tmp.filePath("legacy.safetensors").toStdString();
      zs::io::write_safetensors(file, renamed);
      QwenTextModel legacy = load_qwen_text_model(dir, {file});
      check(*legacy);
    }
    const nlohmann::json mistral3 = {
        {"architectures", {"Mistral3ForConditionalGeneration"}}, {"model_type", "mistral3"},
        {"text_config", {{"model_type", "mistral"}, {"vocab_size", 131072}, {"hidden_size", 5120},
                         {"intermediate_size", 32768}, {"num_hidden_layers", 40}, {"num_attention_heads", 32},
                         {"num_key_value_heads", 8}, {"head_dim", 128}, {"rms_norm_eps", 1e-5}, {"rope_theta", 1e9},
                         {"sliding_window", nullptr}, {"hidden_act", "silu"}}}};
    const QwenTextConfig small = QwenTextConfig::from_json(mistral3, "text_encoder/config.json");
    QVERIFY(small.kind == QwenTextConfig::Kind::mistral && small.sliding_window == 0 && small.head_dim() == 128 &&
            small.rope_theta == 1e9 && !small.qk_norm && !small.qkv_bias);
    const zs::MetaTensorScope meta;
    QCOMPARE(parameter_count(*QwenTextModel(small)), std::int64_t{22'901'314'560});  // transformers' MistralModel
    QCOMPARE(QwenTextConfig::from_json(small.to_json(), "again").num_hidden_layers, std::int64_t{40});
  }

  // A bad config names the file and the key; a [dev]-shaped model refuses a forward without guidance.
  void badConfigsNameTheKey() {
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"axes_dims_rope", {2, 2, 2}}, {"mlp_ratio", "three"}, {"eps", 0}, {"guidance_embeds", 1},
             {"patch_size", 2}, {"timestep_guidance_channels", 63}}) {
      nlohmann::json j = tiny_flux2(true).to_json();
      j[key] = value;
      try {
        Flux2Config::from_json(j, "transformer/config.json");
        QFAIL(key.c_str());
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains("transformer/config.json") && QString(e.what()).contains(QString::fromStdString(key)),
                 e.what());
      }
    }
    Flux2Transformer2DModel model(tiny_flux2(true));
    const auto ref = flux2_fixture();
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             model->forward(ref.tensor("hidden"), ref.tensor("context"), ref.tensor("timestep"),
                                            ref.tensor("img_ids"), ref.tensor("txt_ids")));
  }
};

ZS_TEST_MAIN(TestFlux2);
#include "tst_flux2.moc"
