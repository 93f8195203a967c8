// LoRA adapters (models/lora.h) and the key names LoRA files use (models/lora_names.h).
#include <map>

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "core/error.h"
#include "models/clip_text_model.h"
#include "models/lora.h"
#include "models/lora_names.h"
#include "models/unet_2d_condition.h"
#include "model_support.h"
#include "test_support.h"

#include <QtTest>

using namespace zs::models;
using zs::test::fixture;
using zs::test::max_abs_diff;


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
  c10::impl::IncludeDispatchKeyGuard meta(c10::DispatchKeySet(c10::DispatchKey::Meta));
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
    const auto layers = attach_lora(*unet, default_unet_lora_targets(), LoraOptions{}, 7);
    QVERIFY(!layers.empty());
    QCOMPARE(max_abs_diff(unet->forward(x, t, ctx), base), 0.0);
    // Module parameters are unchanged: adapters are not registered parameters.
    for (const auto& p : unet->named_parameters()) QVERIFY2(p.key().find("lora") == std::string::npos, p.key().c_str());
    // The same seed draws the same adapters.
    UNet2DConditionModel again(zs::test::load_fixture_unet());
    const auto layers2 = attach_lora(*again, default_unet_lora_targets(), LoraOptions{}, 7);
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
    const auto layers = attach_lora(*unet, default_unet_lora_targets(), LoraOptions{}, 5);
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
    c10::impl::IncludeDispatchKeyGuard meta(c10::DispatchKeySet(c10::DispatchKey::Meta));
    UNet2DConditionModel unet(UNetConfig::sd15());
    QCOMPARE(attach_lora(*unet, default_unet_lora_targets(), LoraOptions{}, 1).size(), std::size_t{16 * 2 * 4});
    ClipTextModel te(ClipTextConfig{});
    QCOMPARE(attach_lora(*te, default_text_encoder_lora_targets(), LoraOptions{}, 1).size(), std::size_t{12 * 4});
  }
};

ZS_TEST_MAIN(TestLora);
#include "tst_lora.moc"
