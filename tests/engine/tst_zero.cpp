// engine/zero in one process: the fused CPU AdamW against the reference arithmetic and
// LibTorch's own AdamW, the offload stores, and building a UNet straight into shards.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adamw.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include "core/cpu_allocation_counter.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "models/param_unit.h"
#include "zero/zero_optimizer.h"
#include "zero/state_layout.h"
#include "zero/zero_rules.h"
#include "estimate/memory_estimator.h"
#include "models/sd/sd_shape.h"
#include "models/sd/unet_2d_condition.h"
#include "zero/sharded_init.h"
#include "io/async_file_io.h"
#include "zero/nvme_store.h"
#include "io/safetensors.h"
#include "zero/adafactor.h"
#include "zero/adamw8bit_unit.h"
#include "zero/adamw_unit.h"
#include "zero/blockwise_quant.h"
#include "zero/reference_adafactor.h"
#include "zero/reference_adamw.h"
#include "zero/reference_delay.h"
#include "zero/reference_ema.h"
#include "zero/cpu_adam.h"
#include "zero/stochastic_round.h"

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include "test_support.h"

using namespace zs;

namespace {

// |a - b| <= tol * (|b| + scale) element-wise: relative, with `scale` guarding values near zero
// (for parameters one update, lr; for moments one step's contribution, (1-β)·g).
double worst_relative(const at::Tensor& a, const at::Tensor& b, double scale) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs() / (b.to(at::kDouble).abs() + scale)).max().item<double>();
}

/// gen/adafactor.py's three settings: kohya's (explicit lr, no scale_parameter / relative_step, no first
/// moment), transformers' defaults (relative step, parameter scale), and beta1 with decay and a tighter clip.
struct AdafactorSetting {
  std::string name;
  zero::AdafactorOptions o;
  std::optional<double> lr;
};
std::vector<AdafactorSetting> adafactor_settings() {
  zero::AdafactorOptions relative;
  relative.relative_step = relative.scale_parameter = true;
  zero::AdafactorOptions beta1;
  beta1.beta1 = 0.9;
  beta1.weight_decay = 0.01;
  beta1.clip_threshold = 0.5;
  beta1.scale_parameter = true;
  return {{"kohya", {}, 1e-3}, {"relative", relative, std::nullopt}, {"beta1", beta1, 1e-2}};
}

std::vector<zero::SimdLevel> levels() {
  std::vector<zero::SimdLevel> out = {zero::SimdLevel::scalar};
  if (zero::detected_simd() >= zero::SimdLevel::avx2) out.push_back(zero::SimdLevel::avx2);
  if (zero::detected_simd() >= zero::SimdLevel::avx512) out.push_back(zero::SimdLevel::avx512);
  return out;
}

/// A two-level UNet (cross-attention down, plain down; up mirrored) `width` and 2·`width` wide,
/// cross-attention `width` wide, the first level's transformer `depth` blocks deep (2: a unit per
/// block), `layers` resnets per level.
models::UNetConfig two_level_config(std::int64_t width, std::int64_t depth, std::int64_t layers) {
  models::UNetConfig c;
  c.block_out_channels = {width, 2 * width};
  c.down_block_types = {"CrossAttnDownBlock2D", "DownBlock2D"};
  c.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D"};
  c.num_attention_heads = {2, 2};
  c.transformer_layers_per_block = {depth, 1};
  c.cross_attention_dim = width;
  c.layers_per_block = layers;
  return c;
}

}  // namespace

class TestZero : public QObject {
  Q_OBJECT

 private slots:
  // ReferenceAdafactor against the pinned transformers' Adafactor (src/transformers/optimization.py;
  // tests/fixtures/adafactor.safetensors, gen/adafactor.py): a linear weight, a bias and a 3×3
  // convolution, 3 steps in float64 under kohya's settings (explicit lr, no scale_parameter /
  // relative_step, no first moment), transformers' defaults (relative step, parameter scale) and with
  // beta1, weight decay and a tighter clip; every parameter after every step and the final state.
  void adafactorMatchesTransformers() {
    const QString fixture = zs::test::peerFixture("adafactor.safetensors");
    if (!QFile::exists(fixture)) ZS_SKIP_UNLESS_CI("tests/fixtures/adafactor.safetensors not found: run gen/adafactor.py");
    const zs::io::SafetensorsReader ref(fixture.toStdString());
    const std::vector<std::string> names = {"linear.weight", "linear.bias", "conv.weight"};
    for (const AdafactorSetting& set : adafactor_settings()) {
      zero::NamedTensors params;
      for (const auto& n : names) params.emplace_back(n, ref.tensor("start." + n).clone());
      zero::ReferenceAdafactor opt(params, set.o);
      for (int k = 1; k <= 3; ++k) {
        for (auto& [n, p] : params) p.mutable_grad() = ref.tensor("grad" + std::to_string(k) + "." + n);
        opt.step(set.lr);
        for (const auto& [n, p] : params) {
          const double d = (p - ref.tensor(set.name + ".step" + std::to_string(k) + "." + n)).abs().max().item<double>();
          QVERIFY2(d < 1e-12, qPrintable(QString("%1, step %2, %3: %4").arg(set.name.c_str()).arg(k).arg(n.c_str()).arg(d)));
        }
      }
      std::size_t compared = 0;
      for (const auto& [key, t] : opt.state()) {
        const std::string dot = key.substr(0, key.find('.')), param = key.substr(key.find('.') + 1);
        const at::Tensor want = ref.tensor(set.name + ".state." + param + "." + dot);
        QVERIFY2((t - want).abs().max().item<double>() < 1e-12 * std::max(1.0, want.abs().max().item<double>()), key.c_str());
        ++compared;
      }
      QCOMPARE(compared, std::size_t(set.o.beta1 ? 3 + 5 : 5));
    }
    // transformers refuses an lr with relative_step, and warmup_init without it.
    zero::NamedTensors p{{"w", at::zeros({2, 2}, at::kDouble)}};
    zero::AdafactorOptions warm;
    warm.warmup_init = true;
    QVERIFY_THROWS_EXCEPTION(zs::Error, zero::ReferenceAdafactor(p, warm));
    zero::ReferenceAdafactor rel(p, adafactor_settings()[1].o);
    p[0].second.mutable_grad() = at::ones({2, 2}, at::kDouble);
    QVERIFY_THROWS_EXCEPTION(zs::Error, rel.step(1e-3));
  }

  // bitsandbytes' block-wise 8-bit quantization (tests/fixtures/bnb_blockwise.safetensors,
  // gen/bnb_blockwise.py, the pinned bitsandbytes' CPU backend): both dynamic maps value for value, and a
  // signed and a non-negative tensor of 1000 values (a partial last block) at bitsandbytes' block of
  // 256: every block's absmax identical, the codes too but where bitsandbytes' search picks a farther
  // value, its codes dequantized to its values exactly.
  // The CPU loops of quantize_into/dequantize_flat (issue 38: ~50× faster than the tensor form)
  // give the tensor form's codes, absmax and values bit for bit. Strided codes take the tensor form.
  void quantizerLoopsEqualTheTensorForm() {
    at::manual_seed(4);
    const std::int64_t n = 10 * zero::kQuantBlock + 77;  // a partial last block
    at::Tensor x = at::randn({n});
    x.narrow(0, 0, zero::kQuantBlock).zero_();                                      // an all-zero block
    x.narrow(0, zero::kQuantBlock, zero::kQuantBlock).mul_(1e-7);                   // tiny values
    x.narrow(0, 2 * zero::kQuantBlock, zero::kQuantBlock).abs_();                   // one sign
    for (const bool is_signed : {true, false}) {
      const at::Tensor map = zero::dynamic_map(is_signed), v = is_signed ? x : x.abs();
      const std::int64_t blocks = (n + zero::kQuantBlock - 1) / zero::kQuantBlock;
      for (const bool given : {false, true}) {
        const at::Tensor given_absmax = given ? v.abs().max() * at::ones({blocks}) : at::Tensor();
        at::Tensor codes = at::empty({n}, at::kByte), absmax = at::empty({blocks});
        at::Tensor wide = at::empty({n, 2}, at::kByte), absmax2 = at::empty({blocks});
        at::Tensor strided = wide.select(1, 0);  // not contiguous: the tensor form
        zero::quantize_into(v, map, codes, absmax, given_absmax);
        zero::quantize_into(v, map, strided, absmax2, given_absmax);
        QVERIFY(!strided.is_contiguous());
        QVERIFY2(at::equal(codes, strided), is_signed ? "signed codes" : "unsigned codes");
        QVERIFY(at::equal(absmax, absmax2));
        QVERIFY(at::equal(zero::dequantize_flat(codes, absmax, map), zero::dequantize_flat(strided, absmax, map)));
      }
    }
  }

  // The AVX2 paths of the 8-bit CPU loops (quantize_into, adamw8bit_update with float32 weights)
  // give the scalar loops' bits: codes, absmax, moments and weights, over 3 steps with weight
  // decay on blocks that are all zero, tiny, one-signed, huge and partial, plus a NaN gradient
  // (its block's moments become NaN the same way).
  void blockwiseSimdEqualsTheScalarLoops() {
    if (zero::detected_simd() == zero::SimdLevel::scalar) QSKIP("this CPU has no AVX2: only the scalar loops run here");
    at::manual_seed(12);
    const std::int64_t n = 12 * zero::kQuantBlock + 77;
    at::Tensor x = at::randn({n}) * at::exp(at::randn({n}) * 3);
    x.narrow(0, 0, zero::kQuantBlock).zero_();
    x.narrow(0, zero::kQuantBlock, zero::kQuantBlock).mul_(1e-30);
    x.narrow(0, 2 * zero::kQuantBlock, zero::kQuantBlock).abs_();
    x.narrow(0, 3 * zero::kQuantBlock, zero::kQuantBlock).mul_(1e30);
    const std::int64_t blocks = (n + zero::kQuantBlock - 1) / zero::kQuantBlock;
    const at::Tensor smap = zero::dynamic_map(true), umap = zero::dynamic_map(false);
    struct Run {
      at::Tensor p, mc, ma, vc, va, qc, qa;
    };
    auto run = [&](bool simd) {
      zero::set_blockwise_simd(simd);
      Run r{at::randn({n}), at::empty({n}, at::kByte), at::empty({blocks}), at::empty({n}, at::kByte), at::empty({blocks}),
            at::empty({n}, at::kByte), at::empty({blocks})};
      at::manual_seed(5);
      r.p = at::randn({n});
      zero::quantize_into(x, smap, r.qc, r.qa);
      zero::quantize_into(at::zeros({n}), smap, r.mc, r.ma);
      zero::quantize_into(at::zeros({n}), umap, r.vc, r.va);
      for (int step = 1; step <= 3; ++step) {
        at::Tensor g = at::randn({n}) * at::exp(at::randn({n}) * 2);
        if (step == 2) g[5 * zero::kQuantBlock + 3] = std::nanf("");
        zero::adamw8bit_update(r.p, g, r.mc, r.ma, r.vc, r.va, smap, umap, zero::AdamHyper{1e-3, 0.9, 0.999, 1e-8, 0.01, step});
      }
      zero::set_blockwise_simd(true);
      return r;
    };
    const Run scalar = run(false), simd = run(true);
    QVERIFY(at::equal(simd.qc, scalar.qc));
    QVERIFY(at::equal(simd.qa, scalar.qa));
    QVERIFY(at::equal(simd.mc, scalar.mc) && at::equal(simd.vc, scalar.vc));
    const auto same_bits = [](const at::Tensor& a, const at::Tensor& b) {  // NaN equal to NaN
      return at::equal(a.view(at::kInt), b.view(at::kInt));
    };
    QVERIFY(same_bits(simd.ma, scalar.ma) && same_bits(simd.va, scalar.va));
    QVERIFY(same_bits(simd.p, scalar.p));
    QVERIFY(at::isnan(simd.ma).any().item<bool>());  // the NaN gradient's block
  }

  // Resuming 8-bit moments (issue 37). A checkpoint keeps them dequantized with each block's absmax:
  // loaded into blocks cut as before — every layout, since units pad their shards to whole blocks
  // counted from the unit's start — quantize_into with the saved absmax gives back the very codes.
  // Cut otherwise (a unit whose first element moved, e.g. a checkpoint from a version that cut
  // units differently), the values are quantized again: the bound is that each element lands on
  // the map value nearest to it under its new block's absmax A, i.e. within half the gap g of the
  // map around x/A: |y − x| ≤ A·g/2 (below the signed map's lowest value, about −0.993, the distance
  // to it). The maps' widest gaps are 0.0141 (signed) and 0.0070 (unsigned), so the worst is 0.7 % and
  // 0.35 % of the block's largest magnitude; where moments crowd near zero the map is far finer. Heavy-tailed moments,
  // shifts of 1, 100 and 255 elements.
  void requantizingAnotherCutStaysWithinHalfAGap() {
    at::manual_seed(11);
    const std::int64_t n = 40 * zero::kQuantBlock + 77;
    const at::Tensor scale = at::exp(at::randn({n}) * 2) * 1e-3;
    for (const bool is_signed : {true, false}) {
      const at::Tensor map = zero::dynamic_map(is_signed);
      const at::Tensor x = is_signed ? at::randn({n}) * scale : (at::randn({n}) * scale).square();
      const std::int64_t blocks = (n + zero::kQuantBlock - 1) / zero::kQuantBlock;
      at::Tensor codes = at::empty({n}, at::kByte), absmax = at::empty({blocks});
      zero::quantize_into(x, map, codes, absmax);
      const at::Tensor saved = zero::dequantize_flat(codes, absmax, map);  // what a checkpoint holds
      at::Tensor again = at::empty({n}, at::kByte), absmax_again = at::empty({blocks});
      zero::quantize_into(saved, map, again, absmax_again, absmax);
      QVERIFY2(at::equal(again, codes), "the same cut must give back the same codes");
      const at::Tensor sorted = std::get<0>(map.sort());
      double worst = 0;
      for (const std::int64_t shift : {1, 100, 255}) {
        const at::Tensor part = saved.narrow(0, shift, n - shift).contiguous();
        const std::int64_t m = part.numel(), mb = (m + zero::kQuantBlock - 1) / zero::kQuantBlock;
        at::Tensor c = at::empty({m}, at::kByte), a = at::empty({mb});
        zero::quantize_into(part, map, c, a);
        const at::Tensor y = zero::dequantize_flat(c, a, map);
        const at::Tensor a_el = a.repeat_interleave(zero::kQuantBlock).narrow(0, 0, m);
        const at::Tensor safe = at::where(a_el > 0, a_el, at::ones_like(a_el));
        const at::Tensor s = (part / safe).clamp(-1, 1);
        // The map values around s: hi = first ≥ s, lo = the one before (the ends: the gap to itself).
        const at::Tensor hi_i = at::searchsorted(sorted, s).clamp(0, sorted.numel() - 1);
        const at::Tensor lo_i = (hi_i - 1).clamp_min(0);
        const at::Tensor gap = sorted.index_select(0, hi_i) - sorted.index_select(0, lo_i);
        // Below the map's lowest value (the signed map ends at about −0.993, not −1, so a block's
        // negative extreme comes back up to 0.7 % small) the error is the distance to that value.
        const at::Tensor below = (sorted[0] - s).clamp_min(0);
        const at::Tensor bound = at::where(s < sorted[0], below, 0.5 * gap) * a_el + 1e-6 * a_el;  // + float32 rounding
        const at::Tensor err = (y - part).abs();
        const std::int64_t over = (err > bound).sum().item<std::int64_t>();
        QVERIFY2(over == 0, qPrintable(QString("%1 map, shift %2: %3 elements beyond half a gap")
                                           .arg(is_signed ? "signed" : "unsigned").arg(shift).arg(over)));
        worst = std::max(worst, (err / safe).max().item<double>());
        QVERIFY(!at::equal(c, codes.narrow(0, shift, m)));  // it did re-quantize
      }
      const double widest = (sorted.narrow(0, 1, 255) - sorted.narrow(0, 0, 255)).max().item<double>();
      qInfo("%s map: widest gap %.4f; worst re-quantization error %.4f of the block's absmax", is_signed ? "signed" : "unsigned",
            widest, worst);
      QVERIFY(worst <= 0.5 * widest + 1e-6);
    }
  }

  // AdamW8bit's fused CPU step (one pass per block: dequantize, update, requantize) against the
  // tensor form it replaces on the CPU (still what runs on a GPU; strided codes take it here):
  // float32 and float64 weights, 3 steps with weight decay. The same arithmetic up to where ATen
  // fuses a multiply-add, so a moment's last bit, and now and then its code, may differ.
  void adamw8bitCpuStepFollowsTheTensorForm() {
    const std::int64_t n = 5 * zero::kQuantBlock + 13;
    const at::Tensor smap = zero::dynamic_map(true), umap = zero::dynamic_map(false);
    const std::int64_t blocks = (n + zero::kQuantBlock - 1) / zero::kQuantBlock;
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      at::manual_seed(8);
      const at::Tensor p0 = at::randn({n}, dtype);
      at::Tensor pa = p0.clone(), pb = p0.clone();
      at::Tensor mca = at::zeros({n}, at::kByte), vca = at::zeros({n}, at::kByte), maa = at::zeros({blocks}),
                 vaa = at::zeros({blocks});
      at::Tensor wide_m = at::zeros({n, 2}, at::kByte), wide_v = at::zeros({n, 2}, at::kByte);
      at::Tensor mcb = wide_m.select(1, 0), vcb = wide_v.select(1, 0), mab = at::zeros({blocks}), vab = at::zeros({blocks});
      for (int step = 1; step <= 3; ++step) {
        const at::Tensor g = at::randn({n});
        const zero::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.01, step};
        zero::adamw8bit_update(pa, g, mca, maa, vca, vaa, smap, umap, h);
        zero::adamw8bit_update(pb, g, mcb, mab, vcb, vab, smap, umap, h);
      }
      const double dw = ((pa - pb).abs().max() / p0.abs().max()).item<double>();
      const double same_m = mca.eq(mcb).to(at::kDouble).mean().item<double>();
      const double same_v = vca.eq(vcb).to(at::kDouble).mean().item<double>();
      qInfo("%s: weights %.2e relative, codes equal %.2f %% / %.2f %%", c10::toString(dtype), dw, 100 * same_m,
            100 * same_v);
      QVERIFY(dw <= 1e-6);
      QVERIFY(same_m >= 0.99 && same_v >= 0.99);
      QVERIFY(at::allclose(maa, mab, 1e-5, 0) && at::allclose(vaa, vab, 1e-5, 0));
    }
  }

  void blockwiseQuantizationMatchesBitsandbytes() {
    const QString fixture = zs::test::peerFixture("bnb_blockwise.safetensors");
    if (!QFile::exists(fixture)) ZS_SKIP_UNLESS_CI("tests/fixtures/bnb_blockwise.safetensors not found: run gen/bnb_blockwise.py");
    const zs::io::SafetensorsReader ref(fixture.toStdString());
    for (const auto& [name, is_signed] : {std::pair<std::string, bool>{"dynamic", true}, {"udynamic", false}}) {
      const at::Tensor map = zero::dynamic_map(is_signed);
      QVERIFY2(at::equal(map, ref.tensor(name)), name.c_str());
    }
    for (const auto& [name, is_signed] : {std::pair<std::string, bool>{"signed", true}, {"unsigned", false}}) {
      const at::Tensor map = zero::dynamic_map(is_signed);
      const zero::BlockQuantized q = zero::quantize_blockwise(ref.tensor(name), map);
      QCOMPARE(q.absmax.numel(), std::int64_t{4});
      QVERIFY2(at::equal(q.absmax, ref.tensor(name + ".absmax")), name.c_str());
      // bitsandbytes' CPU search (its BinSearch "Direct2" grid) lands one or more map values off for
      // some inputs — 4 of the 1000 signed values, 92 of the small non-negative ones, where the
      // unsigned map's values crowd below 1e-4 — never nearer than ours: the codes agree except
      // there, and there ours is strictly nearer (in the kernel's arithmetic: x / absmax against the
      // map with its first entry at −1).
      const at::Tensor want = ref.tensor(name + ".codes");
      const at::Tensor differ = (q.codes != want).nonzero().view({-1});
      qInfo("%s: %lld of %lld codes differ from bitsandbytes' CPU kernel, ours nearer each time", name.c_str(),
            static_cast<long long>(differ.numel()), static_cast<long long>(want.numel()));
      at::Tensor code = map.clone();
      code[0] = -1.0f;
      const at::Tensor x = ref.tensor(name);
      for (std::int64_t i = 0; i < differ.numel(); ++i) {
        const std::int64_t k = differ[i].item<std::int64_t>();
        const float s = x[k].item<float>() / q.absmax[k / zero::kQuantBlock].item<float>();
        const float ours = std::abs(s - code[q.codes[k].item<std::uint8_t>()].item<float>());
        const float theirs = std::abs(s - code[want[k].item<std::uint8_t>()].item<float>());
        QVERIFY2(ours < theirs, qPrintable(QString("%1, element %2").arg(name.c_str()).arg(k)));
      }
      // Dequantizing bitsandbytes' own codes gives its values exactly.
      QVERIFY2(at::equal(zero::dequantize_blockwise({want, q.absmax}, map), ref.tensor(name + ".dequantized")), name.c_str());
    }
  }

  // ZeroOptimizer's 8-bit AdamW against the pinned bitsandbytes' AdamW8bit (tests/fixtures/adamw8bit.safetensors,
  // gen/adamw8bit.py: optim/adamw.py on the CPU backend): three tensors, one unit each (bitsandbytes
  // quantizes per tensor; ZeroOptimizer per unit, from the unit's start), 4 steps with weight decay —
  // 18 whole blocks, a partial last block, and a tensor under min_8bit_size whose moments stay 32-bit.
  // Each step starts from bitsandbytes' own state after the step before (read in through load_shards,
  // the resume path: dequantized moments and each block's absmax give back its codes), so the step's
  // arithmetic is compared on its own: the weights to float32 rounding; the new moments equal
  // bitsandbytes' except where its CPU search lands a farther map value (see above; up to ~3 % of the
  // second moment's codes at step 1, whose values crowd the unsigned map's low end), and there ours
  // is at least as near the unquantized moment. Run straight through, those choices compound: the
  // weights after 4 steps then differ by up to a fifth of an update for ~2 % of the elements.
  void adamw8bitMatchesBitsandbytes() {
    const QString fixture = zs::test::peerFixture("adamw8bit.safetensors");
    if (!QFile::exists(fixture)) ZS_SKIP_UNLESS_CI("tests/fixtures/adamw8bit.safetensors not found: run gen/adamw8bit.py");
    const zs::io::SafetensorsReader ref(fixture.toStdString());
    auto comm = comm::Communicator::single();
    std::vector<models::ParamUnit> units;
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (const std::string n : {"a", "b", "c"}) {
      params.emplace_back(n, ref.tensor("start." + n).clone());
      units.push_back(models::ParamUnit{n, {params.back()}});
    }
    zero::ZeroOptions o;
    o.optimizer = zero::OptimizerType::adamw8bit;
    o.weight_decay = 0.01;
    zero::ZeroOptimizer opt(units, *comm, o);
    // 8-bit codes and a float32 absmax a block for a and b, fp32 moments for c (every unit padded to
    // whole blocks).
    QCOMPARE(opt.model_state().optimizer_states, std::int64_t{2 * (4608 + 4608) + 2 * 4 * (18 + 18) + 2 * 4 * 512});
    const double b1 = 0.9, b2 = 0.999;
    for (int k = 1; k <= 4; ++k) {
      const std::string before = "after" + std::to_string(k - 1) + ".", after = "after" + std::to_string(k) + ".";
      if (k > 1)
        opt.load_shards(
            [&](const std::string& unit, const std::string& kind, std::int64_t first, std::int64_t count) {
              const at::Tensor t = kind == "weights" ? ref.tensor("step" + std::to_string(k - 1) + "." + unit)
                                                     : ref.tensor(before + unit + "." + kind);
              at::Tensor out = at::zeros({count}, at::kFloat);
              const std::int64_t n = std::min(count, t.numel() - first);
              out.narrow(0, 0, n).copy_(t.narrow(0, first, n));
              return out;
            },
            k - 1, false);
      opt.zero_grad();
      for (auto& [n, p] : params) p.mutable_grad().copy_(ref.tensor("grad" + std::to_string(k) + "." + n));
      opt.step(1e-3);
      for (const auto& [n, p] : params) {
        const double d = (p - ref.tensor("step" + std::to_string(k) + "." + n)).abs().max().item<double>();
        QVERIFY2(d < 1e-6, qPrintable(QString("step %1, %2: %3").arg(k).arg(n.c_str()).arg(d)));
      }
      std::map<std::string, at::Tensor> state;
      for (const auto& [key, t] : opt.state()) state[key] = t;
      for (const std::string n : {"a", "b", "c"}) {
        const at::Tensor g = ref.tensor("grad" + std::to_string(k) + "." + n);
        for (const std::string kind : {"exp_avg", "exp_avg_sq"}) {
          const bool first = kind == "exp_avg";
          const at::Tensor prev = k > 1 ? ref.tensor(before + n + "." + kind) : at::zeros_like(g);
          const at::Tensor exact = first ? prev * b1 + g * (1 - b1) : prev * b2 + g * g * (1 - b2);
          const at::Tensor want = ref.tensor(after + n + "." + kind), got = state.at(kind + "." + n);
          if (n == "c") {  // 32-bit moments: AdamW's arithmetic
            QVERIFY2((got - want).abs().max().item<double>() <= 1e-6 * want.abs().max().item<double>(), kind.c_str());
            continue;
          }
          const at::Tensor differ = got != want;
          const double same = 1 - differ.to(at::kDouble).mean().item<double>();
          // Nearness as the kernel measures it: x / absmax against the map with its first entry at −1.
          const at::Tensor scale = ref.tensor(after + n + "." + kind + ".absmax").repeat_interleave(zero::kQuantBlock).narrow(0, 0, g.numel());
          const at::Tensor map = zero::dynamic_map(first);
          at::Tensor code = map.clone();
          code[0] = -1.0f;
          auto searched = [&](const at::Tensor& v) {  // the code's value in the search (v = map[code] · absmax)
            const at::Tensor q = v / scale.clamp_min(1e-30);
            return code.index_select(0, (q.unsqueeze(-1) - map).abs().argmin(-1));
          };
          const at::Tensor target = exact / scale.clamp_min(1e-30);
          const at::Tensor ours = (searched(got) - target).abs(), theirs = (searched(want) - target).abs();
          const bool nearer = (ours.masked_select(differ) <= theirs.masked_select(differ) + 1e-6).all().item<bool>();
          if (k == 4)
            qInfo("%s.%s after step 4: %.2f %% of the codes as bitsandbytes', the others nearer the exact moment",
                  n.c_str(), kind.c_str(), 100 * same);
          QVERIFY2(nearer && same > 0.9, qPrintable(QString("step %1, %2.%3").arg(k).arg(n.c_str(), kind.c_str())));
        }
      }
    }
  }

  // ZeroOptimizer's Adafactor on one unit of the fixture's three tensors (a matrix, a vector, a 3×3
  // convolution: two factored, one not) against transformers' Adafactor (adafactor.safetensors, as
  // above), float64, under kohya's settings, transformers' defaults and beta1 + decay + clip.
  void zeroAdafactorMatchesTransformers() {
    const QString fixture = zs::test::peerFixture("adafactor.safetensors");
    if (!QFile::exists(fixture)) ZS_SKIP_UNLESS_CI("tests/fixtures/adafactor.safetensors not found: run gen/adafactor.py");
    const zs::io::SafetensorsReader ref(fixture.toStdString());
    auto comm = comm::Communicator::single();
    for (const auto& [name, af, lr] : adafactor_settings()) {
      std::vector<std::pair<std::string, at::Tensor>> params;
      for (const std::string n : {"linear.weight", "linear.bias", "conv.weight"}) params.emplace_back(n, ref.tensor("start." + n).clone());
      zero::ZeroOptions o;
      o.optimizer = zero::OptimizerType::adafactor;
      o.adafactor = af;
      zero::ZeroOptimizer opt({models::ParamUnit{"unit", params}}, *comm, o);
      for (int k = 1; k <= 3; ++k) {
        opt.zero_grad();
        for (auto& [n, p] : params) p.mutable_grad().copy_(ref.tensor("grad" + std::to_string(k) + "." + n));
        opt.step(lr.value_or(0.0));  // (relative_step computes its own)
        for (const auto& [n, p] : params) {
          const double d = (p - ref.tensor(name + ".step" + std::to_string(k) + "." + n)).abs().max().item<double>();
          QVERIFY2(d < 1e-12, qPrintable(QString("%1, step %2, %3: %4").arg(name.c_str()).arg(k).arg(n.c_str()).arg(d)));
        }
      }
      std::size_t compared = 0;
      for (const auto& [key, t] : opt.state()) {
        if (key == "step") continue;
        const std::string dot = key.substr(0, key.find('.')), param = key.substr(key.find('.') + 1);
        const at::Tensor want = ref.tensor(name + ".state." + param + "." + dot);
        QVERIFY2((t - want).abs().max().item<double>() < 1e-12 * std::max(1.0, want.abs().max().item<double>()), key.c_str());
        ++compared;
      }
      QCOMPARE(compared, std::size_t(af.beta1 ? 3 + 5 : 5));
    }
  }

  // optimizer.master_weights: none rounds each float32 update to bf16 stochastically: over 10^6
  // draws the mean rounded value equals the float32 value within 4 standard errors (a value 0.3 of
  // the way between two bf16 numbers, either sign; and updates smaller than a bf16 step added to
  // random bf16 weights, whose sum a round-to-nearest would lose); an element draws the same bits
  // whatever shard it is cut into; another step draws others.
  void stochasticRoundingIsUnbiased() {
    const std::int64_t n = 1'000'000;
    const double ulp = std::ldexp(1.0, -7);  // bf16's step in [1, 2)
    for (const double sign : {1.0, -1.0}) {
      const double x = sign * (1.0 + 0.3 * ulp);
      const at::Tensor r = zero::stochastic_round_bf16(at::full({n}, x, at::kFloat), zero::rounding_key(42, "unit", 1), 0);
      const double mean = r.to(at::kDouble).mean().item<double>();
      const double se = ulp * std::sqrt(0.3 * 0.7 / static_cast<double>(n));
      QVERIFY2(std::abs(mean - x) <= 4 * se, qPrintable(QString("mean %1 for %2 (se %3)").arg(mean, 0, 'g', 12).arg(x).arg(se)));
      const at::Tensor down = at::full({1}, x, at::kFloat).to(at::kBFloat16);  // the nearest is below: 1.0
      QVERIFY((r == down).to(at::kDouble).mean().item<double>() > 0.69);
    }
    at::Generator gen = at::detail::createCPUGenerator(7);
    const at::Tensor w = at::randn({n}, gen).to(at::kBFloat16).to(at::kFloat);
    const at::Tensor update = 1e-3 * w.abs();  // always below half a bf16 step (2^-9 to 2^-8 of the weight)
    const at::Tensor target = w + update;
    const at::Tensor rounded = zero::stochastic_round_bf16(target, zero::rounding_key(42, "unit", 2), 0).to(at::kDouble);
    const double moved = (rounded - w.to(at::kDouble)).sum().item<double>(), wanted = update.to(at::kDouble).sum().item<double>();
    // Each element's variance is at most (its bf16 step)² / 4; its step is at most 2^-7 of the weight.
    const double se = std::sqrt((w.abs().to(at::kDouble) * std::ldexp(1.0, -7)).pow(2).sum().item<double>() / 4);
    QVERIFY2(std::abs(moved - wanted) <= 4 * se, qPrintable(QString("moved %1, wanted %2, se %3").arg(moved).arg(wanted).arg(se)));
    const double nearest = (target.to(at::kBFloat16).to(at::kDouble) - w.to(at::kDouble)).sum().item<double>();
    QCOMPARE(nearest, 0.0);  // round-to-nearest loses every one of them
    qInfo("1e6 updates of 1e-3 of their weight: sum %.4g; stochastic rounding moves the weights by %.4g (4 se = %.2g), "
          "round-to-nearest by %.4g", wanted, moved, 4 * se, nearest);
    // The same element draws the same bits whatever shard holds it.
    const auto key = zero::rounding_key(42, "unit", 3);
    const at::Tensor whole = zero::stochastic_round_bf16(target, key, 0);
    QVERIFY(at::equal(whole.narrow(0, 1000, 5000), zero::stochastic_round_bf16(target.narrow(0, 1000, 5000), key, 1000)));
    QVERIFY(!at::equal(whole, zero::stochastic_round_bf16(target, zero::rounding_key(42, "unit", 4), 0)));
  }

  // The CPU loop of stochastic rounding (contiguous tensors) draws exactly the tensor form's bits
  // (which a GPU and a strided tensor take): both signs, zeros, subnormals, the largest float
  // (which may round up to infinity), infinities, NaN (kept a NaN), and element indices beyond 2^32.
  void stochasticRoundingLoopEqualsTheTensorForm() {
    at::Generator gen = at::detail::createCPUGenerator(11);
    const std::int64_t n = 200'003;
    at::Tensor x = at::randn({n}, gen) * at::exp(8 * at::randn({n}, gen));
    const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
    for (std::size_t k = 0; k < std::size(specials); ++k) x.narrow(0, static_cast<std::int64_t>(k) * 7, 7).fill_(specials[k]);
    at::Tensor wide = at::empty({n, 2});
    at::Tensor strided = wide.select(1, 0);
    strided.copy_(x);
    QVERIFY(!strided.is_contiguous());
    for (const std::int64_t first : {std::int64_t{0}, std::int64_t{12'345}, (std::int64_t{3} << 32) - 1000}) {
      const auto key = zero::rounding_key(42, "unit", first + 1);
      const at::Tensor loop = zero::stochastic_round_bf16(x, key, first), form = zero::stochastic_round_bf16(strided, key, first);
      QCOMPARE(loop.scalar_type(), at::kBFloat16);
      // NaN stays NaN (its bit pattern is the conversion's: ATen's vectorized one differs by build).
      const at::Tensor nan = x.isnan();
      QVERIFY(loop.isnan().equal(nan) && form.isnan().equal(nan));
      const at::Tensor bits = loop.view(at::kShort).masked_fill(nan, 0), want = form.view(at::kShort).masked_fill(nan, 0);
      QVERIFY2(at::equal(bits, want), qPrintable(QString("first index %1").arg(first)));
    }
  }

  // optimizer.fused_backward at stage 2 on one rank (float64): the run's CPU peak drops by about the
  // whole gradient set (each unit's gradients go once it has stepped; the unfused step holds them
  // all at once), and the weights end the same as unfused (the unit boundaries change autograd's
  // summation order, so float64 shows the equality). Measured with the CPU allocation counter.
  void fusedBackwardHoldsAboutOneUnitsGradients() {
    const models::UNetConfig c = two_level_config(64, 2, 2);
    auto comm = comm::Communicator::single();
    at::manual_seed(3);
    const at::Tensor x = at::randn({1, 4, 16, 16}, at::kDouble), t = at::full({1}, 500, at::kLong);
    const at::Tensor ctx = at::randn({1, 4, 64}, at::kDouble);
    std::map<bool, std::map<std::string, at::Tensor>> weights;
    std::map<bool, std::int64_t> peak;
    std::int64_t total = 0, largest = 0;
    for (const bool fused : {false, true}) {
      at::manual_seed(7);
      models::UNet2DConditionModel unet(c);
      unet->to(at::kDouble);
      total = largest = 0;
      for (const auto& u : unet->units()) {
        total += u.numel() * 8;
        largest = std::max(largest, u.numel() * 8);
      }
      zero::ZeroOptions o;
      o.stage = 2;
      o.persistence_threshold = 0;  // every unit but io hooked
      o.fused_backward = fused;
      CpuAllocationCounter counter;  // from here: gradients, moments, activations, the step's temporaries
      const std::int64_t base = counter.current();
      zero::ZeroOptimizer opt(unet->units(), *comm, o);
      unet->set_unit_hooks(opt.unit_hooks());
      for (int step = 0; step < 2; ++step) {
        opt.zero_grad();
        opt.prepare_fused_step(1e-3, 0);
        unet->forward(x, t, ctx).pow(2).mean().backward();
        opt.reduce_gradients();
        opt.clip_grad_norm(0);
        opt.step(1e-3);
      }
      peak[fused] = counter.peak() - base;
      for (const auto& p : unet->named_parameters()) weights[fused][p.key()] = p.value().detach().clone();
    }
    qInfo("gradients of %.2f MB (largest unit %.2f MB): the run's CPU peak %.2f MB unfused, %.2f MB fused", total / 1e6,
          largest / 1e6, peak[false] / 1e6, peak[true] / 1e6);
    // Unfused, every gradient exists at once; fused, about one unit's (and the reduced copy of one).
    QVERIFY2(peak[false] - peak[true] >= total - 3 * largest, "the fused step holds about one unit's gradients");
    for (const auto& [name, w] : weights[false]) QVERIFY2(at::allclose(weights[true].at(name), w, 1e-10, 1e-12), name.c_str());
  }

  // zero.offload_optimizer.delayed_update (issue 38) against a straight-line reference that applies
  // each update one step late, float64, one rank: after 2 ordinary steps, step k's forward uses the
  // masters of step k−2 (the weights lag the masters by one update), the optimizer sees every
  // gradient in order, the EMA follows the weights the device holds. Stages 1-3, with clipping,
  // and a run saved while an update is pending and resumed (shard_state/load_shards with the
  // lagged weights) equal to the run that went straight on, bit for bit.
  void delayedUpdateAppliesEachUpdateOneStepLate_data() {
    QTest::addColumn<int>("stage");
    QTest::addColumn<double>("clip");
    QTest::addColumn<bool>("resume");
    QTest::newRow("stage 1") << 1 << 0.0 << false;
    QTest::newRow("stage 2, clipping") << 2 << 0.05 << false;
    QTest::newRow("stage 3") << 3 << 0.0 << false;
    QTest::newRow("stage 2, saved and resumed while an update is pending") << 2 << 0.0 << true;
    QTest::newRow("stage 3, saved and resumed while an update is pending") << 3 << 0.0 << true;
  }
  void delayedUpdateAppliesEachUpdateOneStepLate() {
    QFETCH(int, stage);
    QFETCH(double, clip);
    QFETCH(bool, resume);
    const models::UNetConfig c = two_level_config(32, 1, 1);
    auto comm = comm::Communicator::single();
    const int steps = 6, warmup = 2, saved_at = 3;
    const double lr = 1e-3;
    auto batch = [](int step) {
      at::Generator gen = at::detail::createCPUGenerator(300 + step);
      return std::array<at::Tensor, 4>{at::randn({2, 4, 8, 8}, gen).to(at::kDouble), at::randint(0, 1000, {2}, gen, at::kLong),
                                       at::randn({2, 4, 32}, gen).to(at::kDouble), at::randn({2, 4, 8, 8}, gen).to(at::kDouble)};
    };
    // The reference: masters stepped by ReferenceAdamW, each forward on ReferenceDelay's weights.
    at::manual_seed(7);
    models::UNet2DConditionModel ref(c);
    ref->to(at::kDouble);
    zero::NamedTensors ref_params;
    for (const auto& p : ref->named_parameters()) ref_params.emplace_back(p.key(), p.value());
    zero::ReferenceAdamW ref_opt(ref_params, 0.9, 0.999, 1e-8, 0.01);
    zero::ReferenceEma ref_ema(ref_params, 0.8);
    zero::ReferenceDelay delay(ref_params, warmup);
    for (int k = 1; k <= steps; ++k) {
      const auto [x, t, ctx, target] = batch(k);
      delay.begin_forward();
      ref_opt.zero_grad();
      (ref->forward(x, t, ctx) - target).pow(2).mean().backward();
      delay.end_backward();
      ref_opt.clip_grad_norm(clip);
      delay.before_step(k);
      ref_opt.step(lr);
      ref_ema.update(delay.held());
    }
    // ZeroOptimizer with the delayed update; `resume`: rebuilt from its shards after step 3.
    zero::ZeroOptions o;
    o.stage = stage;
    o.offload_optimizer = zero::ZeroOptions::Offload::cpu;
    o.weight_decay = 0.01;
    o.reduce_bucket_size = 3000;
    o.delayed_update = true;
    o.delayed_update_warmup = warmup;
    auto build = [&](models::UNet2DConditionModel& unet) {
      at::manual_seed(7);
      unet = models::UNet2DConditionModel(c);
      unet->to(at::kDouble);
      auto opt = std::make_unique<zero::ZeroOptimizer>(unet->units(), *comm, o);
      unet->set_unit_hooks(opt->unit_hooks());
      opt->enable_ema(0.8);
      return opt;
    };
    models::UNet2DConditionModel unet{nullptr};
    auto opt = build(unet);
    for (int k = 1; k <= steps; ++k) {
      if (resume && k == saved_at + 1) {
        QVERIFY(opt->delayed_pending());
        std::map<std::string, at::Tensor> saved;
        for (const auto& [name, t] : opt->shard_state()) saved[name] = t;
        QVERIFY(saved.count(unet->units().front().name + "/lagged"));
        opt.reset();
        opt = build(unet);
        opt->load_shards([&](const std::string& unit, const std::string& kind, std::int64_t first, std::int64_t count) {
                           return saved.at(unit + "/" + kind).narrow(0, first, count);
                         },
                         saved_at, true, true);
      }
      const auto [x, t, ctx, target] = batch(k);
      opt->zero_grad();
      (unet->forward(x, t, ctx) - target).pow(2).mean().backward();
      opt->reduce_gradients();
      opt->clip_grad_norm(clip);
      opt->step(lr);
      QCOMPARE(opt->delayed_pending(), k > warmup);
      opt->update_ema();
    }
    // The masters against the reference's; the EMA (which followed the lagged weights) against its.
    double worst = 0;
    std::map<std::string, at::Tensor> mine;
    for (const auto& [name, p] : opt->full_parameters()) mine[name] = p;
    for (const auto& [name, p] : ref_params) {
      const double rel = (mine.at(name) - p).abs().max().item<double>() / std::max(p.abs().max().item<double>(), 1e-12);
      worst = std::max(worst, rel);
    }
    std::map<std::string, at::Tensor> ema;
    for (const auto& [name, e] : opt->ema_state()) ema[name] = e;
    for (const auto& [name, e] : ref_ema.tensors()) {
      const double rel = (ema.at(name).to(at::kDouble) - e.to(at::kDouble)).abs().max().item<double>() /
                         std::max(e.abs().max().item<double>(), 1e-12);
      worst = std::max(worst, rel);
    }
    qInfo("worst relative difference from the one-step-late reference: %.3g", worst);
    QVERIFY2(worst < 1e-10, qPrintable(QString("%1").arg(worst)));
    // The last update goes into the weights when the run finishes.
    opt->flush_delayed();
    QVERIFY(!opt->delayed_pending());
  }

  // checkpoint_bytes (what the trainer checks the disk against before a run, issue 59 item 13)
  // equals the bytes shard_state returns, for every kind of state a checkpoint holds: masters or
  // bf16 weights, AdamW's moments, 8-bit AdamW's absmax, Adafactor's first moment and statistics,
  // the EMA, the lagged weights of a pending delayed update; stages 0-3, one rank.
  void checkpointBytesForecastTheShards_data() {
    QTest::addColumn<int>("stage");
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<bool>("ema");
    QTest::addColumn<bool>("delayed");
    QTest::newRow("stage 0, AdamW, f32") << 0 << "AdamW" << false << false << false;
    QTest::newRow("stage 2, AdamW, bf16 with masters, EMA") << 2 << "AdamW" << true << true << false;
    QTest::newRow("stage 3, AdamW8bit, bf16") << 3 << "AdamW8bit" << true << false << false;
    QTest::newRow("stage 2, Adafactor with beta1, EMA") << 2 << "Adafactor" << false << true << false;
    QTest::newRow("stage 3, Adafactor, bf16") << 3 << "Adafactor" << true << false << false;
    QTest::newRow("stage 2, AdamW, bf16, delayed update pending") << 2 << "AdamW" << true << false << true;
  }
  void checkpointBytesForecastTheShards() {
    QFETCH(int, stage);
    QFETCH(QString, optimizer);
    QFETCH(bool, bf16);
    QFETCH(bool, ema);
    QFETCH(bool, delayed);
    const models::UNetConfig c = two_level_config(32, 1, 1);
    auto comm = comm::Communicator::single();
    at::manual_seed(7);
    models::UNet2DConditionModel unet(c);
    zero::ZeroOptions o;
    o.stage = stage;
    o.persistence_threshold = 0;
    o.optimizer = zero::optimizer_from_name(optimizer.toStdString());
    if (optimizer == "Adafactor" && !bf16) o.adafactor.beta1 = 0.9;
    if (bf16) o.compute_dtype = at::kBFloat16;
    if (delayed) {
      o.offload_optimizer = zero::ZeroOptions::Offload::cpu;
      o.delayed_update = true;
      o.delayed_update_warmup = 1;
    }
    zero::ZeroOptimizer opt(unet->units(), *comm, o);
    unet->set_unit_hooks(opt.unit_hooks());
    if (ema) opt.enable_ema(0.9);
    const at::ScalarType dtype = bf16 ? at::kBFloat16 : at::kFloat;
    const at::Tensor x = at::randn({2, 4, 16, 16}).to(dtype), t = at::full({2}, 500, at::kLong);
    const at::Tensor ctx = at::randn({2, 4, 32}).to(dtype);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      unet->forward(x, t, ctx).to(at::kFloat).pow(2).mean().backward();
      opt.reduce_gradients();
      opt.step(1e-3);
      if (ema) opt.update_ema();
    }
    QCOMPARE(opt.delayed_pending(), delayed);
    std::int64_t saved = 0;
    for (const auto& [name, tensor] : opt.shard_state()) saved += tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
    QVERIFY(saved > 0);
    QCOMPARE(opt.checkpoint_bytes(), saved);
  }

  // The host pipeline (issue 38): with AdamW in CPU memory under bf16, the bf16 gradients go into
  // the fused step where they landed instead of being added into a float32 copy first. The same
  // run both ways: bit for bit without clipping (stage 2 and 3, one rank and accumulation 2, where
  // the second micro-batch's deposit adds the first into the copy after all); with clipping the
  // held gradient takes the clip factor into its scale (one rounding instead of two): within 1e-6.
  void hostPipelineEqualsTheFloat32Copy_data() {
    QTest::addColumn<int>("stage");
    QTest::addColumn<int>("accum");
    QTest::addColumn<double>("clip");
    QTest::addColumn<bool>("delayed");
    QTest::newRow("stage 2") << 2 << 1 << 0.0 << false;
    QTest::newRow("stage 3, parameters in CPU memory") << 3 << 1 << 0.0 << false;
    QTest::newRow("stage 2, accumulation 2") << 2 << 2 << 0.0 << false;
    QTest::newRow("stage 2, clipping") << 2 << 1 << 0.05 << false;
    // The delayed update (after one ordinary step) moves the held bf16 gradient aside as it is.
    QTest::newRow("stage 2, delayed update") << 2 << 1 << 0.0 << true;
    QTest::newRow("stage 3, parameters in CPU memory, delayed update") << 3 << 1 << 0.0 << true;
    QTest::newRow("stage 2, accumulation 2, delayed update") << 2 << 2 << 0.0 << true;
  }
  void hostPipelineEqualsTheFloat32Copy() {
    QFETCH(int, stage);
    QFETCH(int, accum);
    QFETCH(double, clip);
    QFETCH(bool, delayed);
    const models::UNetConfig c = two_level_config(32, 1, 1);
    auto comm = comm::Communicator::single();
    at::manual_seed(3);
    const at::Tensor x = at::randn({2, 4, 16, 16}, at::kBFloat16), t = at::full({2}, 500, at::kLong);
    const at::Tensor ctx = at::randn({2, 4, 32}, at::kBFloat16);
    std::map<bool, std::map<std::string, at::Tensor>> weights;
    std::map<bool, std::int64_t> grad_bytes;
    for (const bool held : {false, true}) {
      at::manual_seed(7);
      models::UNet2DConditionModel unet(c);
      zero::ZeroOptions o;
      o.stage = stage;
      o.persistence_threshold = 0;
      o.compute_dtype = at::kBFloat16;
      o.offload_optimizer = zero::ZeroOptions::Offload::cpu;
      if (stage == 3) o.offload_param = zero::ZeroOptions::Offload::cpu;
      o.weight_decay = 0.01;
      o.host_bf16_grads = held;
      o.delayed_update = delayed;
      o.delayed_update_warmup = 1;
      zero::ZeroOptimizer opt(unet->units(), *comm, o);
      unet->set_unit_hooks(opt.unit_hooks());
      for (int step = 0; step < 4; ++step) {
        opt.zero_grad();
        for (int micro = 0; micro < accum; ++micro) {
          opt.set_last_micro_step(micro == accum - 1);
          (unet->forward(x, t, ctx).to(at::kFloat).pow(2).mean() / accum).backward();
        }
        opt.reduce_gradients();
        opt.clip_grad_norm(clip);
        opt.step(1e-3);
      }
      for (const auto& [name, p] : opt.full_parameters()) weights[held][name] = p.detach().to(at::kFloat).clone();
      grad_bytes[held] = opt.offloaded().gradients;
    }
    // Held, the float32 copy is never made without accumulation: 2 bytes a parameter instead of 4
    // (with accumulation 2 the second deposit makes it, beside the bf16 buffer).
    if (accum == 1) QCOMPARE(2 * grad_bytes[true], grad_bytes[false]);
    else QVERIFY(grad_bytes[true] > grad_bytes[false]);
    double worst = 0;
    for (const auto& [name, w] : weights[false]) {
      const at::Tensor h = weights[true].at(name);
      if (clip == 0) QVERIFY2(at::equal(h, w), name.c_str());
      worst = std::max(worst, (h - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-12));
    }
    qInfo("worst relative difference %.3g", worst);
    QVERIFY(worst <= 1e-6);
  }

  // Adafactor's CPU loops (contiguous CPU tensors; issue 39's Flux run found the tensor form's
  // temporaries of a unit's size cost more than the arithmetic) against its tensor form (a GPU; a
  // strided gradient takes it here): a 4-d convolution, a vector and a matrix, the owned part
  // cutting the convolution and the matrix mid-row, beta1, weight decay and a tight clip, 3 steps
  // in float32 (with float32 and bf16 gradients) and float64.
  void adafactorLoopsFollowTheTensorForm() {
    const std::vector<std::vector<std::int64_t>> shapes = {{6, 5, 7, 9}, {17}, {40, 33}};
    const std::vector<std::int64_t> offsets = {0, 1890, 1890 + 17};
    const std::int64_t total = 1890 + 17 + 1320, owned_offset = 1000, owned = total - 1000 - 700;
    zero::AdafactorOptions o;
    o.beta1 = 0.9;
    o.weight_decay = 0.1;
    o.clip_threshold = 0.05;
    o.scale_parameter = true;
    const std::pair<at::ScalarType, at::ScalarType> cases[] = {
        {at::kFloat, at::kFloat}, {at::kFloat, at::kBFloat16}, {at::kDouble, at::kDouble}};
    for (const auto& [dtype, grad_dtype] : cases) {
      const auto opts = at::TensorOptions().dtype(dtype);
      zero::AdafactorUnit loops(offsets, shapes, owned_offset, owned, o, opts), form(offsets, shapes, owned_offset, owned, o, opts);
      at::Generator gen = at::detail::createCPUGenerator(21);
      at::Tensor w_loops = at::randn({owned}, gen).to(dtype), w_form = w_loops.clone();
      for (int step = 1; step <= 3; ++step) {
        const at::Tensor g = at::randn({owned}, gen).to(grad_dtype);
        at::Tensor wide = at::empty({owned, 2}, opts.dtype(grad_dtype));
        at::Tensor strided = wide.select(1, 1);
        strided.copy_(g);
        loops.step(w_loops, g, 1e-2, step, [](at::Tensor&) {});
        form.step(w_form, strided, 1e-2, step, [](at::Tensor&) {});
        const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
        const double dw = (w_loops - w_form).abs().max().item<double>() / w_form.abs().max().item<double>();
        QVERIFY2(dw < tol, qPrintable(QString("step %1, weights: %2").arg(step).arg(dw)));
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          const at::Tensor a = loops.statistics(i), b = form.statistics(i);
          QVERIFY2((a - b).abs().max().item<double>() <= tol * b.abs().max().item<double>(), qPrintable(QString("statistics %1").arg(i)));
        }
        QVERIFY((loops.exp_avg() - form.exp_avg()).abs().max().item<double>() <= tol * form.exp_avg().abs().max().item<double>());
      }
    }
  }

  // What Adafactor keeps per tensor (its memory advantage): a matrix its row and column statistics, a
  // 3×3 convolution factored over its kernel's two dimensions (so it keeps 2/3 of its size), a vector
  // its full second moment; beta1 adds a full first moment.
  void adafactorStateElements() {
    QCOMPARE(zero::ReferenceAdafactor::state_elements({3072, 12288}, false), std::int64_t{3072 + 12288});
    QCOMPARE(zero::ReferenceAdafactor::state_elements({320, 320, 3, 3}, false), std::int64_t{2 * 320 * 320 * 3});
    QCOMPARE(zero::ReferenceAdafactor::state_elements({1280}, false), std::int64_t{1280});
    QCOMPARE(zero::ReferenceAdafactor::state_elements({64, 32}, true), std::int64_t{64 * 32 + 64 + 32});
  }

  void referenceAdamwMatchesLibTorch() {
    at::manual_seed(3);
    at::Tensor ours = at::randn({5, 4}).requires_grad_(true);
    at::Tensor theirs = ours.detach().clone().requires_grad_(true);
    zero::ReferenceAdamW opt({{"w", ours}}, 0.9, 0.99, 1e-8, 0.05);
    torch::optim::AdamW ref({theirs}, torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-8).weight_decay(0.05));
    for (int i = 0; i < 6; ++i) {
      const at::Tensor g = at::randn({5, 4});
      ours.mutable_grad() = g.clone();
      theirs.mutable_grad() = g.clone();
      opt.step(0.01);
      ref.step();
    }
    QVERIFY2((ours - theirs).abs().max().item<double>() < 1e-6, "the reference AdamW differs from torch::optim::AdamW");
    QCOMPARE(opt.steps(), std::int64_t{6});
    const auto bytes = opt.model_state();
    QCOMPARE(bytes.parameters, std::int64_t{80});
    QCOMPARE(bytes.optimizer_states, std::int64_t{160});
  }

  void referenceClippingAndStateRoundTrip() {
    at::Tensor w = at::zeros({2}).requires_grad_(true);
    zero::ReferenceAdamW opt({{"w", w}}, 0.9, 0.999, 1e-8, 0);
    w.mutable_grad() = at::tensor({3.0f, 4.0f});
    QCOMPARE(opt.clip_grad_norm(1.0), 5.0);
    QVERIFY(std::abs(w.grad().norm().item<double>() - 1.0) < 1e-5);
    opt.step(0.1);
    const auto state = opt.state();
    at::Tensor w2 = w.detach().clone().requires_grad_(true);
    zero::ReferenceAdamW opt2({{"w", w2}}, 0.9, 0.999, 1e-8, 0);
    opt2.load_state([&](const std::string& n) {
      for (const auto& [k, t] : state)
        if (k == n) return t;
      throw std::runtime_error(n);
    });
    QCOMPARE(opt2.steps(), std::int64_t{1});
    w.mutable_grad() = at::tensor({1.0f, -1.0f});
    w2.mutable_grad() = at::tensor({1.0f, -1.0f});
    opt.step(0.1);
    opt2.step(0.1);
    QVERIFY(at::allclose(w, w2));
  }

  void referenceEmaAveragesAndSwaps() {
    at::Tensor w = at::zeros({3});
    zero::NamedTensors params{{"w", w}};
    zero::ReferenceEma ema(params, 0.9);
    w.fill_(1.0);
    ema.update(params);
    QVERIFY(std::abs(ema.tensors()[0].second[0].item<double>() - 0.1) < 1e-6);
    ema.swap_into(params);
    QVERIFY(std::abs(w[0].item<double>() - 0.1) < 1e-6);
    ema.swap_into(params);
    QCOMPARE(w[0].item<float>(), 1.0f);
  }

  // zero3_init_flag: each rank of two builds the UNet keeping only its shards; the shards are
  // exactly its part of the whole model's flattened units, small units stay whole, and the
  // CPU memory the build ever holds is about half the model (its shards, plus one unit at a
  // time), where a plain build holds all of it.
  void shardedInitKeepsOnlyTheShard() {
    const models::UNetConfig c = two_level_config(64, 2, 2);  // split into a unit per block
    std::int64_t full_bytes = 0, plain_peak = 0, largest = 0;
    at::manual_seed(7);
    std::vector<models::ParamUnit> whole;
    models::UNet2DConditionModel reference{nullptr};
    {
      CpuAllocationCounter counter;
      const std::int64_t before = counter.current();
      reference = models::UNet2DConditionModel(c);
      plain_peak = counter.peak() - before;
    }
    whole = reference->units();
    for (const auto& u : whole) {
      full_bytes += u.numel() * 4;
      if (u.name != "io") largest = std::max(largest, u.numel() * 4);
    }
    QVERIFY(plain_peak >= full_bytes);
    QCOMPARE(estimate::estimate_memory(models::unet_shape(c), {}).cpu_load_peak, full_bytes);
    const std::int64_t threshold = 40'000;  // units below this stay whole (the first level's sampler)
    std::vector<std::vector<at::Tensor>> shards(whole.size());
    for (int rank = 0; rank < 2; ++rank) {
      at::manual_seed(7);
      zero::PlanOptions plan;
      plan.stage = 3;
      plan.world_size = 2;
      plan.rank = rank;
      plan.persistence_threshold = threshold;
      zero::ShardedInit init(plan);
      std::int64_t peak = 0;
      models::UNet2DConditionModel built{nullptr};
      {
        CpuAllocationCounter counter;  // counts what is alive from earlier too: measure from here
        const std::int64_t before = counter.current();
        built = models::UNet2DConditionModel(c, init.callback());
        peak = counter.peak() - before;
      }
      qInfo("rank %d: peak %.2f MB while building (whole model %.2f MB, largest unit %.2f MB)", rank, peak / 1e6,
            full_bytes / 1e6, largest / 1e6);
      QVERIFY2(peak < full_bytes / 2 + 2 * largest, qPrintable(QString::number(peak)));
      // The estimator's figure for loading with zero3_init_flag bounds the measurement closely
      // (it counts the largest unit on top of every shard; the build meets it a little earlier).
      estimate::EstimateOptions eo;
      eo.world_size = 2;
      eo.stage = 3;
      eo.zero3_init = true;
      eo.persistence_threshold = threshold;
      const auto predicted = estimate::estimate_memory(models::unet_shape(c), eo).cpu_load_peak;
      qInfo("estimated %.2f MB", predicted / 1e6);
      QVERIFY2(predicted >= peak && predicted < peak * 1.25,
               qPrintable(QString("%1 vs %2").arg(predicted).arg(peak)));
      auto units = built->units();
      init.attach(units);
      QVERIFY(init.sharded_units() > 0 && init.sharded_units() < units.size() - 1);
      for (std::size_t i = 0; i < units.size(); ++i) {
        if (!units[i].shard.defined()) {  // io and the small units: whole, with the same values
          for (std::size_t k = 0; k < units[i].parameters.size(); ++k)
            QVERIFY(at::equal(units[i].parameters[k].second, whole[i].parameters[k].second));
          continue;
        }
        QVERIFY(units[i].numel() == 0);  // the parameters are placeholders
        QCOMPARE(units[i].shapes.size(), whole[i].parameters.size());
        shards[i].push_back(units[i].shard);
      }
    }
    for (std::size_t i = 0; i < whole.size(); ++i) {
      if (shards[i].empty()) continue;
      std::vector<at::Tensor> flat;
      for (const auto& [name, p] : whole[i].parameters) flat.push_back(p.detach().reshape({-1}));
      const at::Tensor want = at::cat(flat);
      QVERIFY(at::equal(at::cat(shards[i]).narrow(0, 0, want.numel()), want));
    }
  }

  // zero3_init_flag with the parameters on NVMe: each shard goes to an unlinked spill file in
  // nvme_path as it is cut, so the build's heap never holds more than about one unit (the shards
  // pass through the page cache), the shards read back exactly as the in-memory build's, the file
  // is mapped while they live and nothing is left on disk; the estimator's load peak drops the
  // shards likewise and still bounds the measurement.
  void shardedInitSpillsShardsToNvme() {
    const models::UNetConfig c = two_level_config(64, 2, 2);
    QTemporaryDir dir;
    zero::PlanOptions plan;
    plan.stage = 3;
    plan.world_size = 1;
    plan.persistence_threshold = 40'000;
    auto build = [&](const std::string& spill, std::int64_t* peak) {
      at::manual_seed(7);
      auto init = std::make_unique<zero::ShardedInit>(plan, std::nullopt, spill);
      CpuAllocationCounter counter;
      const std::int64_t before = counter.current();
      models::UNet2DConditionModel built(c, init->callback());
      if (peak) *peak = counter.peak() - before;
      auto units = built->units();
      init->attach(units);
      return units;
    };
    std::int64_t peak = 0;
    const auto plain = build("", nullptr);
    const auto spilled = build(dir.path().toStdString(), &peak);
    std::int64_t shards = 0, largest = 0;
    for (std::size_t i = 0; i < plain.size(); ++i) {
      if (!plain[i].shard.defined()) continue;
      QVERIFY(at::equal(plain[i].shard, spilled[i].shard));
      shards += plain[i].shard.numel() * 4;
      largest = std::max(largest, plain[i].shard.numel() * 4);
    }
    QFile maps("/proc/self/maps");
    QVERIFY(maps.open(QIODevice::ReadOnly));
    QVERIFY(QString(maps.readAll()).contains("zs-sharded-init-"));  // the shards are the mapped file
    QVERIFY(QDir(dir.path()).entryList(QDir::Files).isEmpty());     // unlinked: nothing to clean up
    qInfo("peak %.2f MB while building with the spill (shards %.2f MB, largest %.2f MB)", peak / 1e6, shards / 1e6,
          largest / 1e6);
    QVERIFY2(peak < 3 * largest, qPrintable(QString::number(peak)));
    estimate::EstimateOptions eo;
    eo.stage = 3;
    eo.zero3_init = true;
    eo.persistence_threshold = plan.persistence_threshold;
    const auto in_memory = estimate::estimate_memory(models::unet_shape(c), eo).cpu_load_peak;
    eo.offload_param = estimate::Offload::nvme;
    eo.offload_optimizer = estimate::Offload::cpu;
    const auto on_nvme = estimate::estimate_memory(models::unet_shape(c), eo).cpu_load_peak;
    QVERIFY2(on_nvme >= peak && on_nvme < in_memory, qPrintable(QString("%1 vs %2, %3").arg(on_nvme).arg(peak).arg(in_memory)));
  }

  void cpuAdamMatchesReferenceOnEveryPath() {
    // An odd length exercises the vector loops' scalar tails and the thread chunking.
    const std::int64_t n = (1 << 17) + 37;
    const double lr = 1e-3, wd = 0.01;
    qInfo("this CPU: %s", zero::simd_name(zero::detected_simd()).c_str());
    for (auto level : levels()) {
      at::manual_seed(3);
      const at::Tensor p0 = at::randn({n});
      // Reference: zero::ReferenceAdamW (the arithmetic every ZeRO path is tested against).
      at::Tensor ref = p0.clone();
      zero::ReferenceAdamW reference({{"p", ref}}, 0.9, 0.999, 1e-8, wd);
      at::Tensor p = p0.clone(), m = at::zeros({n}), v = at::zeros({n});
      for (int step = 1; step <= 4; ++step) {
        at::Tensor g = at::randn({n}) * (step == 2 ? 1e-6 : 1.0);  // tiny gradients too
        ref.mutable_grad() = g.clone();
        reference.step(lr);
        zero::cpu_adamw(p, g, m, v, {lr, 0.9, 0.999, 1e-8, wd, step}, at::Tensor(), level);
      }
      const auto st = reference.state();
      const double dp = worst_relative(p, ref, lr), dm = worst_relative(m, st[0].second, 0.1),
                   dv = worst_relative(v, st[1].second, 1e-3);
      qInfo("%s: worst relative difference: parameters %.2e, exp_avg %.2e, exp_avg_sq %.2e",
            zero::simd_name(level).c_str(), dp, dm, dv);
      QVERIFY2(dp <= 1e-6, zero::simd_name(level).c_str());
      QVERIFY2(dm <= 1e-6, zero::simd_name(level).c_str());
      QVERIFY2(dv <= 1e-6, zero::simd_name(level).c_str());
    }
  }

  void cpuAdamMatchesLibTorchAdamW() {
    const std::int64_t n = 50'001;
    at::manual_seed(5);
    const at::Tensor p0 = at::randn({n});
    at::Tensor tp = p0.clone().set_requires_grad(true);
    torch::optim::AdamW torch_opt({tp}, torch::optim::AdamWOptions(2e-3).betas({0.8, 0.99}).eps(1e-7).weight_decay(0.1));
    at::Tensor p = p0.clone(), m = at::zeros({n}), v = at::zeros({n});
    for (int step = 1; step <= 5; ++step) {
      const at::Tensor g = at::randn({n});
      tp.mutable_grad() = g.clone();
      torch_opt.step();
      zero::cpu_adamw(p, g, m, v, {2e-3, 0.8, 0.99, 1e-7, 0.1, step});
    }
    const double d = worst_relative(p, tp.detach(), 2e-3);
    qInfo("against torch::optim::AdamW after 5 steps: %.2e", d);
    QVERIFY(d <= 1e-6);
  }

  // The host pipeline's kernel (issue 38): bf16 gradients read straight into the step equal the
  // float32 step on their widened values bit for bit (widening bf16 is exact), on every path, with
  // and without a gradient scale (1/N, 1/loss scale) applied to the float32 values first.
  void cpuAdamTakesBf16GradientsBitForBit() {
    const std::int64_t n = (1 << 17) + 37;
    for (auto level : levels()) {
      for (double scale : {1.0, 0.25, 1.0 / 3.0}) {
        at::manual_seed(9);
        const at::Tensor p0 = at::randn({n});
        at::Tensor pa = p0.clone(), ma = at::zeros({n}), va = at::zeros({n}), outa = at::empty({n}, at::kBFloat16);
        at::Tensor pb = p0.clone(), mb = at::zeros({n}), vb = at::zeros({n}), outb = at::empty({n}, at::kBFloat16);
        for (int step = 1; step <= 3; ++step) {
          const at::Tensor g16 = (at::randn({n}) * (step == 2 ? 1e-6 : 1.0)).to(at::kBFloat16);
          zero::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.01, step, scale};
          zero::cpu_adamw(pa, g16, ma, va, h, outa, level);
          // The float32 way: the widened gradients scaled in float32, then the step.
          const at::Tensor g32 = g16.to(at::kFloat) * static_cast<float>(scale);
          zero::AdamHyper plain = h;
          plain.grad_scale = 1.0;
          zero::cpu_adamw(pb, scale == 1.0 ? g16.to(at::kFloat) : g32, mb, vb, plain, outb, level);
        }
        const std::string what = zero::simd_name(level) + " scale " + std::to_string(scale);
        QVERIFY2(at::equal(pa, pb) && at::equal(ma, mb) && at::equal(va, vb), what.c_str());
        QVERIFY2(at::equal(outa, outb), what.c_str());
      }
    }
  }

  void cpuAdamHalfOutputIsTheRoundedParameter() {
    const std::int64_t n = 10'007;
    for (auto level : levels()) {
      for (auto dtype : {at::kBFloat16, at::kHalf}) {
        at::manual_seed(7);
        at::Tensor p = at::randn({n}) * 10, m = at::zeros({n}), v = at::zeros({n});
        at::Tensor out = at::empty({n}, at::TensorOptions().dtype(dtype));
        zero::cpu_adamw(p, at::randn({n}), m, v, {1e-2, 0.9, 0.999, 1e-8, 0.0, 1}, out, level);
        // Bit-equal to LibTorch's round-to-nearest-even conversion of the fp32 result.
        QVERIFY2(at::equal(out, p.to(dtype)), (zero::simd_name(level) + " " + c10::toString(dtype)).c_str());
      }
    }
  }

  // Both I/O backends move the same bytes, split into blocks, with many transfers in flight.
  void asyncFileIoRoundTrips_data() {
    QTest::addColumn<QString>("backend");
    QTest::newRow("io_uring") << "io_uring";
    QTest::newRow("threads") << "threads";
  }

  void asyncFileIoRoundTrips() {
    QFETCH(QString, backend);
    QTemporaryDir dir;
    io::AsyncIoOptions o;
    o.backend = backend.toStdString();
    o.block_size = 8192;  // several requests per transfer
    o.queue_depth = 4;
    o.threads = 2;
    std::unique_ptr<zero::NvmeStore> store;
    try {
      store = std::make_unique<zero::NvmeStore>(dir.path().toStdString(), "t", 0, o);
    } catch (const Error& e) {
      // make test installs liburing-dev, and CI's machine allows io_uring: a skip there would hide
      // a build that lost it.
      ZS_SKIP_UNLESS_CI(QString("backend %1 not available here: %2").arg(backend, e.what()));
    }
    QCOMPARE(QString::fromStdString(store->io().backend()), backend);
    const std::int64_t n = 300'001;
    const int a = store->add_region("a.swp", n, at::kFloat), b = store->add_region("a.swp", 77, at::kBFloat16);
    at::Tensor src = zero::aligned_buffer(n, at::kFloat);
    src.copy_(at::randn({n}));
    at::Tensor small = zero::aligned_buffer(77, at::kBFloat16);
    small.copy_(at::randn({77}));
    std::vector<zero::NvmeStore::Ticket> t;
    // Write in pieces that start on blocks, read back in other pieces.
    const std::int64_t block = store->block_elements(a);
    for (std::int64_t first = 0; first < n; first += 50 * block) {
      const std::int64_t count = std::min(50 * block, n - first);
      t.push_back(store->write(a, first, count, src.data_ptr<float>() + first));
    }
    t.push_back(store->write(b, 0, 77, small.data_ptr()));
    for (auto x : t) store->wait(x);
    at::Tensor back = zero::aligned_buffer(n, at::kFloat), back_small = zero::aligned_buffer(77, at::kBFloat16);
    const auto r1 = store->read(a, 0, n, back.data_ptr()), r2 = store->read(b, 0, 77, back_small.data_ptr());
    store->wait(r2);
    store->wait(r1);
    QVERIFY(at::equal(back, src));
    QVERIFY(at::equal(back_small, small));
    QVERIFY(store->bytes() >= n * 4 + 77 * 2);
    const std::string folder = store->dir();
    QVERIFY(QDir(QString::fromStdString(folder)).exists());
    store.reset();
    QVERIFY2(!QDir(QString::fromStdString(folder)).exists(), "the store's folder must go with it");
  }

  void asyncFileIoNamesTheFileOnErrors() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/short.bin").toStdString();
    { std::ofstream(path) << "0123"; }
    const int fd = ::open(path.c_str(), O_RDONLY);
    QVERIFY(fd >= 0);
    io::AsyncFileIo aio({});
    char buf[4096];
    try {
      aio.wait(aio.read(fd, buf, sizeof buf, 0, path));
      QFAIL("a read past the end was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find(path + ": read at byte 4 failed: the file ended early") != std::string::npos, e.what());
    }
    try {
      aio.wait(aio.write(fd, buf, sizeof buf, 0, path));
      QFAIL("a write to a read-only file was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find(path + ": write at byte 0 failed") != std::string::npos, e.what());
    }
    ::close(fd);
  }

  void staleFoldersOfKilledRunsAreRemoved() {
    QTemporaryDir dir;
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::string h;
    for (char c : std::string(host)) h += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
    const QString dead = dir.path() + "/zerostudio-run-optimizer-rank0-" + QString::fromStdString(h) + "-999999999";
    const QString alive = dir.path() + "/zerostudio-run-optimizer-rank1-" + QString::fromStdString(h) + "-" +
                          QString::number(getpid());
    const QString other = dir.path() + "/zerostudio-run-optimizer-rank0-otherhost-999999999";
    for (const QString& d : {dead, alive, other}) QVERIFY(QDir().mkpath(d));
    const auto removed = zero::NvmeStore::remove_stale(dir.path().toStdString());
    QCOMPARE(removed.size(), std::size_t{1});
    QVERIFY(!QDir(dead).exists());
    QVERIFY(QDir(alive).exists());
    QVERIFY(QDir(other).exists());
  }

  void nvmeSpaceCheckSaysWhatIsMissing() {
    try {
      zero::NvmeStore::check_space("/tmp", std::int64_t{1} << 60, "zero.offload_optimizer.nvme_path");
      QFAIL("an exabyte fit");
    } catch (const Error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("zero.offload_optimizer.nvme_path: /tmp has ") != std::string::npos, m.c_str());
      QVERIFY2(m.find("free space there or choose another folder") != std::string::npos, m.c_str());
    }
  }

  // The engine's rules (zero_rules.h) that config validation and the estimator share: the
  // optimizer refuses what validation refuses, with the same key and message, and all at once.
  void optimizerRefusesWhatValidationRefuses() {
    zero::ZeroOptions o;
    o.stage = 2;
    o.compute_dtype = at::kHalf;
    o.fused_backward = true;
    o.delayed_update = true;  // without offload, and fused
    const auto problems = o.problems();
    const std::vector<std::string> expected = {
        "zero.offload_optimizer.delayed_update: needs zero.offload_optimizer.device: cpu (the update runs on a host thread)",
        "zero.offload_optimizer.delayed_update: and optimizer.fused_backward exclude each other (the fused step runs "
        "during backward already)",
        "optimizer.fused_backward: cannot run under precision fp16: loss scaling must see every gradient before any unit "
        "steps; use precision: bf16"};
    QCOMPARE(problems, expected);
    QVERIFY(zero::ZeroOptions{}.problems().empty());
    auto comm = comm::Communicator::single();
    std::vector<models::ParamUnit> units{{"u", {{"u.w", at::zeros({8})}}}};
    o.compute_dtype.reset();
    o.master_weights = false;  // float32: no masters to drop (the config's rule, now the engine's too)
    try {
      zero::ZeroOptimizer opt(units, *comm, o);
      QFAIL("master_weights none under float32 was accepted");
    } catch (const Error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("optimizer.master_weights: none keeps only bf16 weights") != std::string::npos, e.what());
      QVERIFY2(m.find("; optimizer.fused_backward") == std::string::npos, e.what());  // fp16 is no longer asked for
      QVERIFY2(m.find("; zero.offload_optimizer.delayed_update: needs optimizer.master_weights: fp32") != std::string::npos,
               e.what());
    }
    QCOMPARE(zero::shard_multiple(zero::OptimizerType::adamw8bit), zero::kQuantBlock);
    QCOMPARE(zero::shard_multiple(zero::OptimizerType::adafactor), std::int64_t{1});
    QVERIFY(!zero::uses_8bit_state(zero::OptimizerType::adamw8bit, zero::kMin8bitSize - 1));
    QVERIFY(zero::uses_8bit_state(zero::OptimizerType::adamw8bit, zero::kMin8bitSize));
    QVERIFY(!zero::uses_8bit_state(zero::OptimizerType::adamw, zero::kMin8bitSize));
    QVERIFY(zero::keeps_master_weights(true, false, zero::Offload::cpu));
    QVERIFY(!zero::keeps_master_weights(true, false, zero::Offload::none));
    QVERIFY(!zero::keeps_master_weights(false, true, zero::Offload::cpu));
    zero::RuleSettings host;
    host.compute = zero::Precision::bf16;
    host.offload_optimizer = zero::Offload::cpu;
    QVERIFY(zero::holds_bf16_grads(host));
    host.optimizer = zero::OptimizerType::adamw8bit;
    QVERIFY(!zero::holds_bf16_grads(host));
  }

  // The state layouts (state_layout.h) the estimator counts: ZeroOptimizer's own optimizer bytes
  // are these, for each optimizer.
  void stateLayoutsAreWhatTheOptimizerHolds() {
    const std::int64_t small = zero::kMin8bitSize - 1, large = zero::kMin8bitSize + zero::kQuantBlock;
    QCOMPARE(zero::adamw8bit_state_layout(small, small, true).bytes(), 12 * small);  // 32-bit below min_8bit_size
    QCOMPARE(zero::adamw8bit_state_layout(large, large, true).bytes(), 6 * large + 8 * (large / zero::kQuantBlock));
    QCOMPARE(zero::adamw_state_layout(100, false, 8).bytes(), 1600);
    const zero::StateLayout af = zero::adafactor_state_layout(1000, 70, true, true);
    QCOMPARE(af.bytes(), 4 * (1000 + 1000 + 70));
    QCOMPARE(af.resident_bytes(), 4 * 70);  // the statistics stay in memory with NVMe
    // Counted by hand: a unit of 5200 elements (8-bit; padded to 5376 = 21 blocks for AdamW8bit)
    // and one of 30 (32-bit; padded to a block); Adafactor's statistics 80 + 64, 80 and 10 + 3.
    const std::map<zero::OptimizerType, std::int64_t> expected = {
        {zero::OptimizerType::adamw, 12 * (5200 + 30)},
        {zero::OptimizerType::adamw8bit, 6 * 5376 + 8 * 21 + 12 * 256},
        {zero::OptimizerType::adafactor, 4 * (2 * 5200 + 144 + 80) + 4 * (2 * 30 + 13)}};
    auto comm = comm::Communicator::single();
    for (const auto& [type, bytes] : expected) {
      at::manual_seed(1);
      std::vector<models::ParamUnit> units{{"big", {{"big.w", at::randn({80, 64})}, {"big.b", at::randn({80})}}},
                                           {"small", {{"small.w", at::randn({10, 3})}}}};
      zero::ZeroOptions o;
      o.optimizer = type;
      o.compute_dtype = at::kBFloat16;  // with masters
      o.adafactor.beta1 = 0.9;
      zero::ZeroOptimizer opt(units, *comm, o);
      QCOMPARE(opt.model_state().optimizer_states, bytes);
    }
  }

  // Each optimizer behind UnitOptimizer holds what its layout says (the swapped parts are its
  // swappable tensors, the rest stays in memory) and gives back the moments it is given (8-bit
  // ones within their quantization).
  void unitOptimizersHoldWhatTheirLayoutSays() {
    const std::int64_t owned = 2 * zero::kMin8bitSize;
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    zero::AdafactorOptions af;
    af.beta1 = 0.9;
    std::vector<std::unique_ptr<zero::UnitOptimizer>> all;
    all.push_back(std::make_unique<zero::AdamWUnit>(owned, zero::AdamSettings{}, opts, false));
    all.push_back(std::make_unique<zero::AdamW8bitUnit>(owned, owned, zero::AdamSettings{}, opts, zero::dynamic_map(true),
                                                        zero::dynamic_map(false)));
    all.push_back(std::make_unique<zero::AdafactorUnit>(std::vector<std::int64_t>{0},
                                                        std::vector<std::vector<std::int64_t>>{{64, owned / 64}}, 0, owned,
                                                        af, opts));
    at::manual_seed(5);
    const at::Tensor m = at::randn({owned}) * 1e-3;
    for (std::size_t i = 0; i < all.size(); ++i) {
      zero::UnitOptimizer& o = *all[i];
      std::int64_t swapped = 0;
      for (const auto& [file, t] : o.swappable()) swapped += t->numel() * static_cast<std::int64_t>(t->element_size());
      const zero::StateLayout l = o.layout(/*masters=*/false, 4);
      QCOMPARE(l.bytes() - l.resident_bytes(), swapped);
      o.set_moment(zero::Moment::first, m);
      const at::Tensor back = o.moment(zero::Moment::first);
      QVERIFY(back.defined());
      const double tolerance = i == 1 ? 0.05 * m.abs().max().item<double>() : 0.0;  // 8-bit codes
      QVERIFY2(at::allclose(back, m, 0, tolerance), std::to_string(i).c_str());
    }
    QCOMPARE(all[2]->layout(false, 4).resident_bytes(), std::int64_t{4 * (64 + owned / 64)});  // the statistics
  }

  void cpuAdamRejectsBadTensors() {
    at::Tensor p = at::zeros({8}), g = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
    try {
      zero::cpu_adamw(p, at::zeros({8}, at::kDouble), m, v, {});
      QFAIL("a float64 gradient was accepted");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).find("grad must be a contiguous float32 CPU tensor") != std::string::npos);
    }
    try {
      zero::cpu_adamw(p, g, m, at::zeros({7}), {});
      QFAIL("a short exp_avg_sq was accepted");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).find("exp_avg_sq") != std::string::npos);
    }
  }
};

ZS_TEST_MAIN(TestZero);
#include "tst_zero.moc"
