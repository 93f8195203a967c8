// LoRA adapters (models/lora.h) and the key names LoRA files use (models/sd/lora_names.h).
#include <map>

#include <ATen/ATen.h>

#include "models/sd/lora_file.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/clip_text_model.h"
#include "models/lora.h"
#include "models/peft_lora_config.h"
#include "models/transformer_lora_file.h"
#include "models/sd/sd_family.h"
#include "models/sd/lora_names.h"
#include "models/sd/unet_2d_condition.h"
#include "model_support.h"
#include "test_support.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace zs::models;
using zs::test::fixture;
using zs::test::max_abs_diff;
using zs::checkpoint::LoraFileFormat;
using zs::checkpoint::LoraModelPart;


namespace {

// kohya's sd-scripts default module set (networks/lora.py: every Linear and 1×1 Conv2d below a
// Transformer2DModel; every Linear of CLIPAttention and CLIPMLP), as our targets.
const std::vector<std::string> kKohyaUNet = {"to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2",
                                             "proj_in", "proj_out"};
const std::vector<std::string> kKohyaText = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};

using LoraShapes = std::map<std::string, std::vector<std::int64_t>>;

// kohya keys and shapes of every adapter of one part.
void add_kohya(LoraShapes& out, torch::nn::Module& root, LoraPart part, bool sdxl, const UNetConfig& unet) {
  const auto layers = lora_layers(root);
  std::vector<std::string> paths;
  for (const auto& l : layers) paths.push_back(l.name);
  const auto stems = kohya_lora_stems(part, sdxl, paths, unet);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    out[stems[i] + ".lora_down.weight"] = layers[i].adapter->down.sizes().vec();
    out[stems[i] + ".lora_up.weight"] = layers[i].adapter->up.sizes().vec();
  }
}

struct Layout {
  std::size_t unet_modules = 0, text_modules = 0;
  LoraShapes keys;
};

// Full-size SD 1.5 or SDXL base with kohya's default targets at rank 8, built with the Meta
// dispatch key included (no memory is touched; only names and shapes are read).
Layout kohya_layout(bool xl) {
  const zs::test::MetaTensorScope meta;
  LoraOptions o;
  o.rank = 8;
  o.alpha = 8;
  Layout out;
  const UNetConfig uc = xl ? UNetConfig::sdxl() : UNetConfig::sd15();
  UNet2DConditionModel unet(uc);
  out.unet_modules = attach_lora(*unet, kKohyaUNet, o, 1).size();
  add_kohya(out.keys, *unet, LoraPart::unet, xl, uc);
  ClipTextModel te(ClipTextConfig{});
  out.text_modules = attach_lora(*te, kKohyaText, o, 2).size();
  add_kohya(out.keys, *te, LoraPart::text_encoder, xl, uc);
  if (xl) {
    ClipTextModel te2(zs::test::open_clip_config(1280, 32, 1280));
    out.text_modules += attach_lora(*te2, kKohyaText, o, 3).size();
    add_kohya(out.keys, *te2, LoraPart::text_encoder_2, xl, uc);
  }
  return out;
}

void randomize_up(torch::nn::Module& root) {
  at::NoGradGuard no_grad;
  for (const auto& l : lora_layers(root)) l.adapter->up.normal_(0.0, 0.05);
}

// A tiny model of a family with adapters on the attention projections and (LoCon) the resnets'
// 3×3 conv1, rank 4, alpha 2 (scale 0.5), up drawn at random as after training.
struct AdaptedTinyModel {
  UNetConfig unet_config;
  UNet2DConditionModel unet{nullptr};
  ClipTextModel te{nullptr}, te2{nullptr};
  std::vector<LoraModelPart> parts() const {
    std::vector<LoraModelPart> p{{LoraPart::unet, unet.ptr().get()}, {LoraPart::text_encoder, te.ptr().get()}};
    if (te2) p.push_back({LoraPart::text_encoder_2, te2.ptr().get()});
    return p;
  }
  std::size_t adapted() const {
    std::size_t n = 0;
    for (const auto& p : parts()) n += lora_layers(*p.root).size();
    return n;
  }
};

AdaptedTinyModel tiny_model(const UNetConfig& uc, bool sdxl, bool with_adapters) {
  AdaptedTinyModel m;
  m.unet_config = uc;
  m.unet = UNet2DConditionModel(uc);
  m.te = ClipTextModel(ClipTextConfig::from_file(fixture("sd15-tiny/text_encoder/config.json")));
  if (sdxl) m.te2 = ClipTextModel(zs::test::open_clip_config(128, 3, 32));
  if (with_adapters) {
    LoraOptions o;
    o.rank = 4;
    o.alpha = 2;
    std::vector<std::string> targets = sd_family().default_lora_targets();
    targets.push_back("conv1");
    attach_lora(*m.unet, targets, o, 1);
    attach_lora(*m.te, default_text_encoder_lora_targets(), o, 2);
    if (sdxl) attach_lora(*m.te2, default_text_encoder_lora_targets(), o, 3);
    for (const auto& p : m.parts()) randomize_up(*p.root);
  }
  return m;
}

const zs::io::SafetensorsEntry* entry(const zs::io::SafetensorsReader& r, const std::string& name) {
  for (const auto& e : r.entries())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace

class TestLora : public QObject {
  Q_OBJECT

 private slots:
  void targetsNameTheLastPathComponents() {
    QVERIFY(lora_target_matches("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", {"to_q"}));
    QVERIFY(lora_target_matches("a.attn1.to_out.0", {"to_out.0"}));
    QVERIFY(lora_target_matches("a.attn1.to_out.0", {"attn1.to_out.0"}));
    QVERIFY(!lora_target_matches("a.attn2.to_out.0", {"attn1.to_out.0"}));
    QVERIFY(!lora_target_matches("a.xto_q", {"to_q"}));
    QVERIFY(lora_target_matches("to_q", {"to_q"}));
    QVERIFY(!lora_target_matches("a.to_q.b", {"to_q"}));
  }

  void theAdaptedModelStartsAtTheBase() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(zs::test::load_fixture_unet());
    unet->eval();
    at::manual_seed(0);
    const at::Tensor x = at::randn({2, 4, 32, 32}), t = at::tensor({10, 500}), ctx = at::randn({2, 77, 32});
    at::NoGradGuard no_grad;
    const at::Tensor base = unet->forward(x, t, ctx);
    const auto layers = attach_lora(*unet, sd_family().default_lora_targets(), LoraOptions{}, 7);
    QVERIFY(!layers.empty());
    QCOMPARE(max_abs_diff(unet->forward(x, t, ctx), base), 0.0);
    // Module parameters are unchanged: adapters are not registered parameters.
    for (const auto& p : unet->named_parameters()) QVERIFY2(p.key().find("lora") == std::string::npos, p.key().c_str());
    // The same seed draws the same adapters.
    UNet2DConditionModel again(zs::test::load_fixture_unet());
    const auto layers2 = attach_lora(*again, sd_family().default_lora_targets(), LoraOptions{}, 7);
    QCOMPARE(layers2.size(), layers.size());
    QCOMPARE(max_abs_diff(layers2[3].adapter->down, layers[3].adapter->down), 0.0);
    // Kaiming-uniform bound 1/sqrt(fan_in); up starts at zero.
    const double bound = 1.0 / std::sqrt(static_cast<double>(layers[0].adapter->down.size(1)));
    QVERIFY(layers[0].adapter->down.abs().max().item<double>() <= bound);
    QVERIFY(layers[0].adapter->down.abs().max().item<double>() > 0.5 * bound);
    QCOMPARE(layers[0].adapter->up.abs().max().item<double>(), 0.0);
  }

  void mergingEqualsTheAdaptedModel() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(zs::test::load_fixture_unet());
    unet->eval();
    LoraOptions o;
    o.rank = 4;
    o.alpha = 2;
    // Attention, feed-forward, the transformer's projections and the resnets' 3×3 convolutions
    // (LoCon), with Gaussian-initialised down matrices.
    o.init = "gaussian";
    const auto layers = attach_lora(*unet, {"to_q", "to_k", "to_v", "to_out.0", "ff.net.2", "proj_in", "conv1"}, o, 3);
    bool conv3x3 = false;
    for (const auto& l : layers) conv3x3 = conv3x3 || (l.conv && l.adapter->down.size(2) == 3);
    QVERIFY(conv3x3);
    randomize_up(*unet);
    at::manual_seed(1);
    const at::Tensor x = at::randn({2, 4, 32, 32}), t = at::tensor({10, 500}), ctx = at::randn({2, 77, 32});
    at::NoGradGuard no_grad;
    const at::Tensor adapted = unet->forward(x, t, ctx);
    set_lora_enabled(*unet, false);
    const at::Tensor base = unet->forward(x, t, ctx);
    set_lora_enabled(*unet, true);
    QVERIFY(max_abs_diff(adapted, base) > 1e-3);  // the adapters do something
    merge_lora(*unet);
    QVERIFY(lora_layers(*unet).empty());
    const double d = max_abs_diff(unet->forward(x, t, ctx), adapted);
    QVERIFY2(d <= 1e-5, std::to_string(d).c_str());

    ClipTextModel te(ClipTextConfig::from_file(fixture("sd15-tiny/text_encoder/config.json")));
    te->eval();
    attach_lora(*te, kKohyaText, o, 4);
    randomize_up(*te);
    const at::Tensor ids = at::randint(0, 1000, {2, 77}, at::kLong);
    const at::Tensor te_adapted = te->forward(ids).last_hidden_state;
    merge_lora(*te);
    const double dt = max_abs_diff(te->forward(ids).last_hidden_state, te_adapted);
    QVERIFY2(dt <= 1e-5, std::to_string(dt).c_str());
  }

  void gradientsReachOnlyTheAdapters() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(zs::test::load_fixture_unet());
    for (auto& p : unet->parameters()) p.set_requires_grad(false);
    const auto layers = attach_lora(*unet, sd_family().default_lora_targets(), LoraOptions{}, 5);
    for (const auto& l : layers)
      for (auto [name, t] : l.tensors()) t.set_requires_grad(true);
    at::manual_seed(2);
    const at::Tensor out = unet->forward(at::randn({1, 4, 32, 32}), at::tensor({100}), at::randn({1, 77, 32}));
    out.square().mean().backward();
    // up starts at zero, so only up gets a gradient in the first step (down's is up-weighted).
    for (const auto& l : layers) {
      QVERIFY(l.adapter->up.grad().defined() && l.adapter->up.grad().abs().sum().item<double>() > 0);
    }
    for (const auto& p : unet->parameters()) QVERIFY(!p.grad().defined());
  }

  void aTargetThatSelectsNothingIsNamed() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(zs::test::load_fixture_unet());
    try {
      attach_lora(*unet, {"to_q", "to_qq"}, LoraOptions{}, 1);
      QFAIL("no error");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("'to_qq'") != std::string::npos, e.what());
    }
    LoraOptions bad;
    bad.init = "orthogonal";
    QVERIFY_THROWS_EXCEPTION(zs::Error, attach_lora(*unet, {"to_q"}, bad, 1));
  }

  // Golden facts from kohya's sd-scripts (networks/lora.py; its training log says "create LoRA
  // for Text Encoder: 72 modules." and "create LoRA for U-Net: 192 modules." for SD 1.x, and for
  // SDXL 72 + 192 text-encoder modules and 722 U-Net modules), and key names as A1111 and
  // ComfyUI read them (SDXL's UNet under the LDM block names).
  void kohyaLayoutOfStableDiffusion15() {
    const Layout l = kohya_layout(false);
    QCOMPARE(l.unet_modules, std::size_t{192});
    QCOMPARE(l.text_modules, std::size_t{72});
    QCOMPARE(l.keys.size(), std::size_t{2 * (192 + 72)});
    const LoraShapes expected = {
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", {8, 320}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", {320, 8}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight", {8, 768}},
        {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", {8, 320, 1, 1}},
        {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", {320, 8, 1, 1}},
        {"lora_unet_down_blocks_2_attentions_1_transformer_blocks_0_ff_net_2.lora_down.weight", {8, 5120}},
        {"lora_unet_down_blocks_2_attentions_1_transformer_blocks_0_ff_net_2.lora_up.weight", {1280, 8}},
        {"lora_unet_mid_block_attentions_0_transformer_blocks_0_ff_net_0_proj.lora_up.weight", {10240, 8}},
        {"lora_unet_up_blocks_1_attentions_0_proj_out.lora_down.weight", {8, 1280, 1, 1}},
        {"lora_unet_up_blocks_3_attentions_2_transformer_blocks_0_attn2_to_out_0.lora_down.weight", {8, 320}},
        {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", {8, 768}},
        {"lora_te_text_model_encoder_layers_11_mlp_fc1.lora_up.weight", {3072, 8}},
        {"lora_te_text_model_encoder_layers_11_mlp_fc2.lora_down.weight", {8, 3072}},
    };
    for (const auto& [key, shape] : expected) {
      QVERIFY2(l.keys.count(key), key.c_str());
      QVERIFY2(l.keys.at(key) == shape, key.c_str());
    }
  }

  void kohyaLayoutOfSdxl() {
    const Layout l = kohya_layout(true);
    QCOMPARE(l.unet_modules, std::size_t{722});
    QCOMPARE(l.text_modules, std::size_t{72 + 192});
    const LoraShapes expected = {
        {"lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_down.weight", {8, 2048}},
        {"lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_up.weight", {640, 8}},
        {"lora_unet_input_blocks_4_1_proj_in.lora_down.weight", {8, 640}},
        {"lora_unet_input_blocks_7_1_transformer_blocks_9_attn1_to_q.lora_down.weight", {8, 1280}},
        {"lora_unet_middle_block_1_proj_in.lora_up.weight", {1280, 8}},
        {"lora_unet_middle_block_1_transformer_blocks_9_ff_net_2.lora_down.weight", {8, 5120}},
        {"lora_unet_output_blocks_0_1_transformer_blocks_9_attn2_to_v.lora_up.weight", {1280, 8}},
        {"lora_unet_output_blocks_5_1_transformer_blocks_1_attn2_to_k.lora_down.weight", {8, 2048}},
        {"lora_unet_output_blocks_5_1_transformer_blocks_1_attn2_to_k.lora_up.weight", {640, 8}},
        {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", {8, 768}},
        {"lora_te2_text_model_encoder_layers_0_self_attn_out_proj.lora_down.weight", {8, 1280}},
        {"lora_te2_text_model_encoder_layers_31_mlp_fc1.lora_up.weight", {5120, 8}},
    };
    for (const auto& [key, shape] : expected) {
      QVERIFY2(l.keys.count(key), key.c_str());
      QVERIFY2(l.keys.at(key) == shape, key.c_str());
    }
    // No key of SD 1.x's diffusers-style UNet names in an SDXL file.
    for (const auto& [key, shape] : l.keys) QVERIFY2(key.find("down_blocks") == std::string::npos, key.c_str());
  }

  void defaultTargetsAreTheAttentionProjections() {
    const zs::test::MetaTensorScope meta;
    UNet2DConditionModel unet(UNetConfig::sd15());
    QCOMPARE(attach_lora(*unet, sd_family().default_lora_targets(), LoraOptions{}, 1).size(), std::size_t{16 * 2 * 4});
    // At rank 16: per transformer of width d, 14·16·d + 2·16·768 (the cross-attention's to_k and
    // to_v read the 768-wide text); widths 320 ×5, 640 ×5, 1280 ×6 — what models/lora.h quotes.
    std::int64_t elements = 0;
    for (const auto& l : lora_layers(*unet)) elements += l.adapter->down.numel() + l.adapter->up.numel();
    QCOMPARE(elements, std::int64_t{14 * 16 * (5 * 320 + 5 * 640 + 6 * 1280) + 16 * 2 * 16 * 768});
    QCOMPARE(elements, std::int64_t{3'188'736});
    ClipTextModel te(ClipTextConfig{});
    QCOMPARE(attach_lora(*te, default_text_encoder_lora_targets(), LoraOptions{}, 1).size(), std::size_t{12 * 4});
  }
  // The layout of sd-scripts' networks/lora.py (save_weights: lora_down/lora_up weights and a
  // scalar alpha buffer per module; the ss_* keys of train_network.py) and of diffusers'
  // pytorch_lora_weights.safetensors (peft's lora_A/lora_B under unet. / text_encoder.,
  // metadata {"format": "pt"}: diffusers' loaders/lora_base.py write_lora_layers).
  void loraFilesHoldTheLayoutsTheirReadersExpect() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const AdaptedTinyModel m = tiny_model(UNetConfig::from_file(fixture("sd15-tiny/unet/config.json")), false, true);
    const std::size_t n = m.adapted();
    QVERIFY(n > 20);
    const std::string kohya = dir.filePath("kohya.safetensors").toStdString();
    zs::checkpoint::write_lora_file(kohya, m.parts(), m.unet_config, LoraFileFormat::kohya, {});
    const zs::io::SafetensorsReader k(kohya);
    QCOMPARE(k.entries().size(), 3 * n);
    const std::string q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    const std::map<std::string, std::vector<std::int64_t>> shapes = {
        {q + ".lora_down.weight", {4, 32}},
        {q + ".lora_up.weight", {32, 4}},
        {q + ".alpha", {}},
        {"lora_unet_mid_block_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight", {4, 32}},
        {"lora_unet_up_blocks_1_attentions_1_transformer_blocks_0_attn1_to_out_0.lora_up.weight", {32, 4}},
        {"lora_unet_down_blocks_1_resnets_0_conv1.lora_down.weight", {4, 32, 3, 3}},
        {"lora_unet_down_blocks_1_resnets_0_conv1.lora_up.weight", {64, 4, 1, 1}},
        {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", {4, 32}},
        {"lora_te_text_model_encoder_layers_0_self_attn_out_proj.alpha", {}},
    };
    for (const auto& [key, shape] : shapes) {
      const auto* e = entry(k, key);
      QVERIFY2(e, key.c_str());
      QVERIFY2(e->shape == shape, key.c_str());
      QCOMPARE(e->dtype, std::string("F16"));  // sd-scripts' usual --save_precision fp16
    }
    QCOMPARE(k.tensor(q + ".alpha").to(at::kDouble).item<double>(), 2.0);
    const std::map<std::string, std::string> ss = {
        {"ss_network_module", "networks.lora"}, {"ss_network_dim", "4"}, {"ss_network_alpha", "2.0"},
        {"ss_network_args", R"({"conv_alpha":"2.0","conv_dim":"4"})"}, {"ss_v2", "False"},
        {"ss_base_model_version", "sd_v1"}};
    for (const auto& [key, value] : ss) QCOMPARE(k.metadata().at(key), value);

    const std::string peft = dir.filePath("pytorch_lora_weights.safetensors").toStdString();
    zs::checkpoint::write_lora_file(peft, m.parts(), m.unet_config, LoraFileFormat::diffusers, {});
    const zs::io::SafetensorsReader d(peft);
    QCOMPARE(d.entries().size(), 2 * n);
    QVERIFY(entry(d, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight"));
    QVERIFY(entry(d, "unet.up_blocks.1.resnets.0.conv1.lora_B.weight"));
    QVERIFY(entry(d, "text_encoder.text_model.encoder.layers.1.self_attn.v_proj.lora_B.weight"));
    // diffusers' lora_adapter_metadata (issue 59 item 10): r and lora_alpha = r per component,
    // the scale being inside lora_B; read back, scale 1.
    QCOMPARE(d.metadata().at("format"), std::string("pt"));
    for (const char* component : {"unet", "text_encoder"}) {
      const auto config = zs::models::read_peft_lora_config(d, component, peft);
      QVERIFY2(config && config->r == 4 && config->scale() == 1.0, component);
    }
    QCOMPARE(zs::checkpoint::detect_lora_format(kohya), LoraFileFormat::kohya);
    QCOMPARE(zs::checkpoint::detect_lora_format(peft), LoraFileFormat::diffusers);
  }

  // Written, then read into a fresh model of the same shape: every layer's update scale·up·down
  // comes back (kohya keeps alpha; diffusers carries the scale inside lora_B), for SD 1.x and
  // SDXL (whose kohya UNet keys are LDM names, mapped back to the layers).
  void loraFilesReadBackIntoTheSameUpdates_data() {
    QTest::addColumn<bool>("sdxl");
    QTest::addColumn<bool>("kohya");
    QTest::newRow("sd15 kohya") << false << true;
    QTest::newRow("sd15 diffusers") << false << false;
    QTest::newRow("sdxl kohya") << true << true;
    QTest::newRow("sdxl diffusers") << true << false;
  }
  void loraFilesReadBackIntoTheSameUpdates() {
    ZS_REQUIRE_SHARED();
    QFETCH(bool, sdxl);
    QFETCH(bool, kohya);
    QTemporaryDir dir;
    UNetConfig uc = UNetConfig::from_file(fixture("sd15-tiny/unet/config.json"));
    if (sdxl) {
      zs::test::write_tiny_sdxl(dir.filePath("xl").toStdString());
      uc = UNetConfig::from_file(dir.filePath("xl/unet/config.json").toStdString());
    }
    const AdaptedTinyModel trained = tiny_model(uc, sdxl, true);
    const AdaptedTinyModel fresh = tiny_model(uc, sdxl, false);
    const auto format = kohya ? LoraFileFormat::kohya : LoraFileFormat::diffusers;
    zs::checkpoint::LoraFileOptions o;
    o.sdxl = sdxl;
    o.dtype = at::kFloat;
    const std::string path = dir.filePath("lora.safetensors").toStdString();
    zs::checkpoint::write_lora_file(path, trained.parts(), uc, format, o);
    QCOMPARE(zs::checkpoint::read_lora_file(path, fresh.parts(), uc, sdxl), trained.adapted());
    QCOMPARE(fresh.adapted(), trained.adapted());
    for (std::size_t p = 0; p < trained.parts().size(); ++p) {
      const auto a = lora_layers(*trained.parts()[p].root), b = lora_layers(*fresh.parts()[p].root);
      QCOMPARE(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        QCOMPARE(b[i].name, a[i].name);
        const double d = max_abs_diff(lora_delta(a[i]), lora_delta(b[i]));
        QVERIFY2(d <= 1e-7, qPrintable(QString::fromStdString(a[i].name) + ": " + QString::number(d)));
      }
    }
  }

  // A LoRA tensor of the wrong rank (a 0-dimension matrix, an alpha of several values) is refused
  // naming the file and the tensor, in SD's and Qwen-Image's readers alike, instead of failing
  // inside LibTorch as an "unexpected failure" (issue 59 item 7).
  void aMisshapenLoraTensorIsRefusedByName() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const AdaptedTinyModel m = tiny_model(UNetConfig::from_file(fixture("sd15-tiny/unet/config.json")), false, true);
    const std::string good = dir.filePath("good.safetensors").toStdString();
    zs::checkpoint::write_lora_file(good, m.parts(), m.unet_config, LoraFileFormat::kohya, {});
    const zs::io::SafetensorsReader reader(good);
    std::string down, alpha;
    for (const auto& e : reader.entries()) {
      if (down.empty() && e.name.ends_with(".lora_down.weight")) down = e.name;
      if (alpha.empty() && e.name.ends_with(".alpha")) alpha = e.name;
    }
    QVERIFY(!down.empty() && !alpha.empty());
    for (const auto& [name, bad] : {std::pair{down, at::zeros({})}, std::pair{alpha, at::ones({2})}}) {
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const auto& e : reader.entries()) tensors.emplace_back(e.name, e.name == name ? bad : reader.tensor(e.name));
      const std::string path = dir.filePath("bad.safetensors").toStdString();
      zs::io::write_safetensors(path, tensors);
      const AdaptedTinyModel fresh = tiny_model(m.unet_config, false, false);
      try {
        zs::checkpoint::read_lora_file(path, fresh.parts(), m.unet_config, false);
        QFAIL(name.c_str());
      } catch (const zs::Error& e) {
        const QString what = e.what();
        QVERIFY2(what.contains("bad.safetensors") && (what.contains("dimensions") || what.contains("one number")), e.what());
      }
    }
    const std::string qwen = dir.filePath("qwen.safetensors").toStdString();
    zs::io::write_safetensors(qwen, {{"transformer_blocks.0.attn.to_q.lora_A.weight", at::zeros({})},
                                     {"transformer_blocks.0.attn.to_q.lora_B.weight", at::zeros({8, 4})}});
    try {
      zs::models::read_transformer_lora_file(qwen, {"transformer_blocks.0.attn.to_q"}, "Qwen-Image");
      QFAIL("qwen");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("qwen.safetensors") && QString(e.what()).contains("two dimensions"), e.what());
    }
  }

  void aLoraOfAnotherModelIsRefusedByName() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const AdaptedTinyModel m = tiny_model(UNetConfig::from_file(fixture("sd15-tiny/unet/config.json")), false, true);
    const std::string path = dir.filePath("lora.safetensors").toStdString();
    zs::checkpoint::write_lora_file(path, m.parts(), m.unet_config, LoraFileFormat::kohya, {});
    // Read into the text encoder alone: the UNet's first key names no layer.
    const AdaptedTinyModel fresh = tiny_model(m.unet_config, false, false);
    try {
      zs::checkpoint::read_lora_file(path, {{LoraPart::text_encoder, fresh.te.ptr().get()}}, m.unet_config, false);
      QFAIL("read");
    } catch (const zs::Error& e) {
      const QString what = e.what();
      QVERIFY2(what.contains("lora.safetensors") && what.contains("'lora_unet_") && what.contains("names no layer"),
               e.what());
    }
    const std::string other = dir.filePath("weights.safetensors").toStdString();
    zs::io::write_safetensors(other, {{"x", at::zeros({2})}});
    try {
      zs::checkpoint::detect_lora_format(other);
      QFAIL("detect");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("weights.safetensors: not a LoRA file"), e.what());
    }
    // A model without adapters has nothing to export.
    try {
      zs::checkpoint::write_lora_file(dir.filePath("none.safetensors").toStdString(), fresh.parts(), m.unet_config,
                                      LoraFileFormat::kohya, {});
      QFAIL("write");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("no adapters"), e.what());
    }
  }
};

ZS_TEST_MAIN(TestLora);
#include "tst_lora.moc"
