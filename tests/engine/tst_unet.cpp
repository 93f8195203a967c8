// UNet2DConditionModel: golden values from diffusers 0.25 (forward and gradients), unit grouping,
// config parsing and weight loading errors.
#include <ATen/ATen.h>

#include <map>
#include <set>
#include <algorithm>
#include <torch/nn/module.h>

#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/cpu_allocation_counter.h"
#include "io/safetensors.h"
#include "models/sd/unet_2d_condition.h"
#include "models/weights.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs::models;
using zs::test::fixture;
using zs::test::max_abs_diff;


namespace {

UNet2DConditionModel load_tiny_unet() { return UNet2DConditionModel(zs::test::load_fixture_unet()); }

}  // namespace

class TestUNet : public QObject {
  Q_OBJECT

 private slots:
  void parsesTheFixtureConfig() {
    ZS_REQUIRE_SHARED();
    const UNetConfig c = UNetConfig::from_file(fixture("sd15-tiny/unet/config.json"));
    QCOMPARE(c.block_out_channels, (std::vector<std::int64_t>{32, 64}));
    // attention_head_dim is the number of heads in diffusers.
    QCOMPARE(c.num_attention_heads, (std::vector<std::int64_t>{8, 8}));
    QCOMPARE(c.cross_attention_dim, std::int64_t{32});
    QCOMPARE(c.norm_num_groups, std::int64_t{8});
    QVERIFY(!c.use_linear_projection);
  }

  void loadsEveryFixtureTensorByName() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(UNetConfig::from_file(fixture("sd15-tiny/unet/config.json")));
    const zs::io::SafetensorsReader reader(fixture("sd15-tiny/unet/diffusion_pytorch_model.safetensors"));
    QCOMPARE(unet->named_parameters().size(), reader.entries().size());
    const LoadReport report = load_weights(*unet, reader);
    QVERIFY(report.unexpected.empty());
  }

  void forwardMatchesDiffusers() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet = load_tiny_unet();
    const zs::io::SafetensorsReader io(fixture("sd15-tiny-reference/unet_io.safetensors"));
    c10::NoGradGuard no_grad;
    const at::Tensor out = unet->forward(io.tensor("sample"), io.tensor("timestep"), io.tensor("encoder_hidden_states"));
    QCOMPARE(out.sizes().vec(), io.tensor("out").sizes().vec());
    const double err = max_abs_diff(out, io.tensor("out"));
    qInfo("UNet forward max abs error %.3g", err);
    QVERIFY2(err <= 1e-4, qPrintable(QString("max abs error %1").arg(err)));
  }

  void gradientsMatchDiffusers() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet = load_tiny_unet();
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/unet_grad.safetensors"));
    const at::Tensor sample = ref.tensor("sample").requires_grad_(true);
    const at::Tensor context = ref.tensor("encoder_hidden_states").requires_grad_(true);
    const at::Tensor out = unet->forward(sample, ref.tensor("timestep"), context);
    const at::Tensor loss = (out - ref.tensor("target")).pow(2).mean();
    const double want = ref.tensor("loss").item<double>();
    QVERIFY2(std::abs(loss.item<double>() - want) <= 1e-5 * std::abs(want), "loss differs");
    loss.backward();
    std::map<std::string, at::Tensor> grads;
    for (const auto& p : unet->named_parameters()) grads["grad." + p.key()] = p.value().grad();
    grads["grad_input.sample"] = sample.grad();
    grads["grad_input.encoder_hidden_states"] = context.grad();
    int checked = 0;
    for (const auto& e : ref.entries()) {
      if (e.name.rfind("grad", 0) != 0) continue;
      QVERIFY2(grads.count(e.name), e.name.c_str());
      const at::Tensor want_g = ref.tensor(e.name);
      const double scale = want_g.abs().max().item<double>();
      const double err = max_abs_diff(grads[e.name], want_g);
      QVERIFY2(err <= 1e-3 * scale, qPrintable(QString("%1: error %2 vs max %3").arg(e.name.c_str()).arg(err).arg(scale)));
      ++checked;
    }
    QCOMPARE(checked, 9);
  }

  // Activation checkpointing: the same gradients (parameters and inputs), less peak memory.
  void gradientCheckpointingKeepsGradientsAndSavesMemory() {
    ZS_REQUIRE_SHARED();
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/unet_grad.safetensors"));
    const at::Tensor sample = ref.tensor("sample").repeat({4, 1, 1, 1});
    const at::Tensor context = ref.tensor("encoder_hidden_states").repeat({4, 1, 1});
    const at::Tensor timestep = ref.tensor("timestep").repeat({4}), target = ref.tensor("target").repeat({4, 1, 1, 1});
    std::map<std::string, at::Tensor> grads[2];
    std::int64_t peak[2] = {0, 0};
    for (int ckpt : {0, 1}) {
      UNet2DConditionModel unet = load_tiny_unet();
      unet->set_gradient_checkpointing(ckpt == 1);
      const at::Tensor x = sample.clone().requires_grad_(true), c = context.clone().requires_grad_(true);
      {
        zs::CpuAllocationCounter counter;
        const at::Tensor loss = (unet->forward(x, timestep, c) - target).pow(2).mean();
        loss.backward();
        peak[ckpt] = counter.peak();
      }
      for (const auto& p : unet->named_parameters()) grads[ckpt][p.key()] = p.value().grad().clone();
      grads[ckpt]["input.sample"] = x.grad();
      grads[ckpt]["input.context"] = c.grad();
    }
    double worst = 0;
    for (const auto& [name, g] : grads[0]) {
      QVERIFY2(grads[1].at(name).defined(), name.c_str());
      worst = std::max(worst, max_abs_diff(grads[1].at(name), g) / std::max(g.abs().max().item<double>(), 1e-20));
    }
    qInfo("gradient checkpointing: worst relative gradient difference %.3g; peak CPU bytes during forward+backward "
          "%lld without, %lld with (%.0f %%)", worst, static_cast<long long>(peak[0]), static_cast<long long>(peak[1]),
          100.0 * static_cast<double>(peak[1]) / static_cast<double>(peak[0]));
    // float32: the rerun forward and its own backward add in another order where OpenBLAS picks
    // its kernels by alignment and CPU (1.63e-6 on an AMD EPYC VM, below 1e-6 on the machine the
    // bound was first set on); a checkpointing bug moves gradients by far more.
    QVERIFY(worst <= 1e-5);
    QVERIFY2(peak[1] < peak[0] * 8 / 10, "checkpointing should cut the peak by more than 20 %");
  }

  void unitsCoverEveryParameterOnce() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(UNetConfig::from_file(fixture("sd15-tiny/unet/config.json")));
    const auto units = unet->units();
    std::set<std::string> seen;
    std::int64_t total = 0;
    for (const auto& u : units) {
      QVERIFY2(!u.parameters.empty(), u.name.c_str());
      for (const auto& [name, t] : u.parameters) QVERIFY2(seen.insert(name).second, name.c_str());
      total += u.numel();
    }
    QCOMPARE(seen.size(), unet->named_parameters().size());
    std::int64_t all = 0;
    for (const auto& p : unet->parameters()) all += p.numel();
    QCOMPARE(total, all);
    // io + down(resnet, attention, downsampler, resnet) + mid(3) + up(2 resnets+upsampler, 2×(resnet, attention))
    QCOMPARE(units.size(), std::size_t{1 + 4 + 3 + 3 + 4});
    QCOMPARE(units[0].name, std::string("io"));
    QCOMPARE(units[1].name, std::string("down_blocks.0.resnets.0"));
    QCOMPARE(units[2].name, std::string("down_blocks.0.attentions.0"));
    QCOMPARE(units[3].name, std::string("down_blocks.0.downsamplers.0"));
    // The io unit holds exactly the in/out and embedding layers.
    for (const auto& [name, t] : units[0].parameters)
      QVERIFY2(name.rfind("conv_in.", 0) == 0 || name.rfind("time_embedding.", 0) == 0 ||
                   name.rfind("conv_norm_out.", 0) == 0 || name.rfind("conv_out.", 0) == 0,
               name.c_str());
  }

  void hookSeesUnitsInForwardOrder() {
    ZS_REQUIRE_SHARED();
    UNet2DConditionModel unet(UNetConfig::from_file(fixture("sd15-tiny/unet/config.json")));
    // Records the hooks' calls; the io unit (0) opens and closes the forward.
    struct Recorder : UnitHooks {
      std::vector<std::size_t> before_calls, after_calls;
      at::Tensor before(std::size_t u, const at::Tensor& x) override {
        before_calls.push_back(u);
        return x;
      }
      at::Tensor after(std::size_t u, const at::Tensor& y) override {
        after_calls.push_back(u);
        return y;
      }
    };
    auto recorder = std::make_shared<Recorder>();
    unet->set_unit_hooks(recorder);
    c10::NoGradGuard no_grad;
    unet->forward(at::randn({1, 4, 16, 16}), at::tensor({5}), at::randn({1, 3, 32}));
    const std::size_t n = unet->units().size();
    std::vector<std::size_t> want_before, want_after;
    for (std::size_t i = 0; i < n; ++i) want_before.push_back(i);
    for (std::size_t i = 1; i < n; ++i) want_after.push_back(i);
    want_after.push_back(0);
    QCOMPARE(recorder->before_calls, want_before);
    QCOMPARE(recorder->after_calls, want_after);
  }

  void linearProjectionAndListHeads() {
    // SD 2.x style: linear projections, per-block heads, two transformer layers.
    nlohmann::json j = {{"in_channels", 3}, {"out_channels", 3}, {"block_out_channels", {16, 32}},
                        {"down_block_types", {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D"}},
                        {"up_block_types", {"CrossAttnUpBlock2D", "CrossAttnUpBlock2D"}},
                        {"layers_per_block", 1}, {"cross_attention_dim", 8}, {"attention_head_dim", {2, 4}},
                        {"norm_num_groups", 4}, {"use_linear_projection", true}, {"transformer_layers_per_block", 2}};
    UNet2DConditionModel unet(UNetConfig::from_json(j, "test"));
    bool found = false;
    for (const auto& p : unet->named_parameters())
      if (p.key() == "down_blocks.1.attentions.0.proj_in.weight") {
        QCOMPARE(p.value().sizes().vec(), (std::vector<std::int64_t>{32, 32}));
        found = true;
      }
    QVERIFY(found);
    c10::NoGradGuard no_grad;
    const at::Tensor out = unet->forward(at::randn({2, 3, 8, 8}), at::tensor({1, 999}), at::randn({2, 5, 8}));
    QCOMPARE(out.sizes().vec(), (std::vector<std::int64_t>{2, 3, 8, 8}));
    // The config round-trips through diffusers' keys.
    const UNetConfig back = UNetConfig::from_json(unet->config().to_json(), "round trip");
    QCOMPARE(back.num_attention_heads, (std::vector<std::int64_t>{2, 4}));
    QCOMPARE(back.transformer_layers_per_block, (std::vector<std::int64_t>{2, 2}));
  }

  // A transformer of several blocks is one unit per block (the first with norm and proj_in, the
  // last with proj_out): the same parameters, each in exactly one unit, in forward order; the
  // same output and gradients as the transformer kept whole, with and without checkpointing;
  // recomputation holds one block's activations, so the checkpointed peak drops.
  void transformerBlocksAreUnitsOfTheirOwn() {
    nlohmann::json j = {{"in_channels", 3}, {"out_channels", 3}, {"block_out_channels", {16, 32}},
                        {"down_block_types", {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D"}},
                        {"up_block_types", {"CrossAttnUpBlock2D", "CrossAttnUpBlock2D"}},
                        {"layers_per_block", 1}, {"cross_attention_dim", 8}, {"attention_head_dim", {2, 4}},
                        {"norm_num_groups", 4}, {"use_linear_projection", true}, {"transformer_layers_per_block", {3, 3}}};
    UNetConfig whole_config = UNetConfig::from_json(j, "test");
    whole_config.split_transformer_blocks = false;
    at::manual_seed(3);
    UNet2DConditionModel whole(whole_config);
    at::manual_seed(3);
    UNet2DConditionModel split(UNetConfig::from_json(j, "test"));
    const auto wu = whole->units(), su = split->units();
    // Transformers of three blocks: down 1 + 1, mid 1, up 2 + 2: 7 × 2 more units.
    QCOMPARE(su.size(), wu.size() + 14);
    std::vector<std::string> names;
    for (const auto& u : su) names.push_back(u.name);
    const auto at = std::find(names.begin(), names.end(), "down_blocks.1.attentions.0");
    QVERIFY(at != names.end() && at + 2 < names.end());
    QCOMPARE(*(at + 1), std::string("down_blocks.1.attentions.0.transformer_blocks.1"));
    QCOMPARE(*(at + 2), std::string("down_blocks.1.attentions.0.transformer_blocks.2"));
    const auto& head = su[static_cast<std::size_t>(at - names.begin())].parameters;
    QCOMPARE(head.front().first, std::string("down_blocks.1.attentions.0.norm.weight"));
    QCOMPARE(head.back().first.rfind("down_blocks.1.attentions.0.transformer_blocks.0.", 0), std::size_t{0});
    QCOMPARE(su[static_cast<std::size_t>(at - names.begin()) + 2].parameters.back().first,
             std::string("down_blocks.1.attentions.0.proj_out.bias"));
    std::set<std::string> seen;
    for (const auto& u : su)
      for (const auto& [name, t] : u.parameters) QVERIFY2(seen.insert(name).second, name.c_str());
    QCOMPARE(seen.size(), split->named_parameters().size());

    const at::Tensor x = at::randn({2, 3, 32, 32}), t = at::tensor({1, 999}), c = at::randn({2, 5, 8});
    const at::Tensor target = at::randn({2, 3, 32, 32});
    std::int64_t peak[2] = {0, 0};
    for (bool checkpointing : {false, true}) {
      std::vector<at::Tensor> grads[2];
      UNet2DConditionModel* models[2] = {&whole, &split};
      for (int m = 0; m < 2; ++m) {
        (*models[m])->zero_grad();
        (*models[m])->set_gradient_checkpointing(checkpointing);
        zs::CpuAllocationCounter counter;
        const std::int64_t before = counter.current();
        ((*models[m])->forward(x, t, c) - target).pow(2).mean().backward();
        if (checkpointing) peak[m] = counter.peak() - before;
        for (const auto& p : (*models[m])->parameters()) grads[m].push_back(p.grad().clone());
      }
      for (std::size_t i = 0; i < grads[0].size(); ++i)
        QVERIFY2(at::allclose(grads[1][i], grads[0][i], 1e-5, 1e-7), qPrintable(QString("parameter %1").arg(i)));
    }
    qInfo("checkpointed forward+backward peak: %lld bytes whole, %lld split", static_cast<long long>(peak[0]),
          static_cast<long long>(peak[1]));
    QVERIFY(peak[1] < peak[0]);
    c10::NoGradGuard no_grad;
    QVERIFY(at::equal(whole->forward(x, t, c), split->forward(x, t, c)));
  }

  void refusesWhatItCannotBuild() {
    nlohmann::json j = {{"block_out_channels", {32, 64}}, {"down_block_types", {"CrossAttnDownBlock2D", "DownBlock2D"}},
                        {"up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D"}}, {"addition_embed_type", "image"}};
    try {
      UNetConfig::from_json(j, "unet/config.json");
      QFAIL("accepted addition_embed_type image");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("unet/config.json: addition_embed_type"), e.what());
    }
    j["addition_embed_type"] = "text_time";  // SDXL's, but without its projection width
    try {
      UNetConfig::from_json(j, "unet/config.json");
      QFAIL("accepted text_time without projection_class_embeddings_input_dim");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("projection_class_embeddings_input_dim: needed"), e.what());
    }
    j.erase("addition_embed_type");
    j["norm_num_groups"] = 5;
    QVERIFY_THROWS_EXCEPTION(zs::Error, UNetConfig::from_json(j, "x"));
  }

  // SDXL's text_time conditioning: add_embedding (pooled text + 6 size/crop ids, each with its own
  // sinusoids) added to the time embedding, on a small SDXL-shaped config from diffusers' keys.
  void sdxlAddedConditioning() {
    const nlohmann::json j = {{"block_out_channels", {32, 64}},
                              {"down_block_types", {"DownBlock2D", "CrossAttnDownBlock2D"}},
                              {"up_block_types", {"CrossAttnUpBlock2D", "UpBlock2D"}},
                              {"attention_head_dim", {2, 4}}, {"transformer_layers_per_block", {1, 2}},
                              {"cross_attention_dim", 24}, {"use_linear_projection", true}, {"norm_num_groups", 8},
                              {"layers_per_block", 1}, {"in_channels", 4}, {"out_channels", 4},
                              {"addition_embed_type", "text_time"}, {"addition_time_embed_dim", 8},
                              {"projection_class_embeddings_input_dim", 16 + 6 * 8}};
    const UNetConfig c = UNetConfig::from_json(j, "sdxl-small/unet/config.json");
    UNet2DConditionModel unet(c);
    std::map<std::string, std::vector<std::int64_t>> shapes;
    for (const auto& p : unet->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
    QCOMPARE(shapes["add_embedding.linear_1.weight"], (std::vector<std::int64_t>{128, 64}));
    QCOMPARE(shapes["add_embedding.linear_2.weight"], (std::vector<std::int64_t>{128, 128}));
    c10::NoGradGuard no_grad;
    const at::Tensor sample = at::randn({2, 4, 8, 8}), ctx = at::randn({2, 5, 24}), pooled = at::randn({2, 16});
    const at::Tensor ids = at::tensor({64.0, 64.0, 0.0, 0.0, 64.0, 64.0, 48.0, 64.0, 8.0, 0.0, 64.0, 64.0}).view({2, 6});
    const at::Tensor out = unet->forward(sample, at::tensor({1, 500}), ctx, pooled, ids);
    QCOMPARE(out.sizes().vec(), (std::vector<std::int64_t>{2, 4, 8, 8}));
    // The added conditioning matters: other crop ids, another prediction.
    const at::Tensor other = unet->forward(sample, at::tensor({1, 500}), ctx, pooled, ids.flip({0}));
    QVERIFY((out - other).abs().max().item<double>() > 1e-6);
    try {
      unet->forward(sample, at::tensor({1, 500}), ctx);
      QFAIL("ran without text_embeds and time_ids");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("needs text_embeds [B, pooled] and time_ids [B, 6]"), e.what());
    }
    const UNetConfig back = UNetConfig::from_json(unet->config().to_json(), "round trip");
    QCOMPARE(back.projection_class_embeddings_input_dim, std::int64_t{64});
  }

  void wrongWeightsNameEveryTensor() {
    ZS_REQUIRE_SHARED();
    nlohmann::json j = {{"block_out_channels", {32, 32}}, {"down_block_types", {"CrossAttnDownBlock2D", "DownBlock2D"}},
                        {"up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D"}}, {"cross_attention_dim", 32},
                        {"layers_per_block", 1}, {"norm_num_groups", 8}};
    UNet2DConditionModel unet(UNetConfig::from_json(j, "x"));
    const zs::io::SafetensorsReader reader(fixture("sd15-tiny/unet/diffusion_pytorch_model.safetensors"));
    try {
      load_weights(*unet, reader);
      QFAIL("loaded mismatched weights");
    } catch (const zs::Error& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains("diffusion_pytorch_model.safetensors: does not fit"), e.what());
      QVERIFY2(msg.contains("down_blocks.1.resnets.0.conv2.weight has shape [64, 64, 3, 3], the model needs [32, 32, 3, 3]"), e.what());
      QVERIFY2(msg.contains(" more"), e.what());
    }
  }
};

ZS_TEST_MAIN(TestUNet);
#include "tst_unet.moc"
