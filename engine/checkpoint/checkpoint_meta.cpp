#include "checkpoint/checkpoint_meta.h"

#include <type_traits>

#include "core/error.h"

namespace zs::checkpoint {

using nlohmann::json;

json CheckpointMeta::to_json() const {
  json j = {{"step", step},
            {"optimizer_steps", optimizer_steps},
            {"batches_consumed", batches_consumed},
            {"epoch", epoch},
            {"loss", loss},
            {"smoothed_loss", smoothed_loss},
            {"val_loss", val_loss ? json(*val_loss) : json(nullptr)},
            {"val_loss_step", val_loss_step},
            {"lr", lr},
            {"time", time},
            {"reason", reason},
            {"world_size", world_size},
            {"stage", stage},
            {"precision", precision},
            {"config_hash", config_hash},
            {"sharding", sharding},
            {"config", config}};
  if (samples_seen) j["samples_seen"] = *samples_seen;
  if (smoothed_state) j["smoothed_state"] = {smoothed_state->first, smoothed_state->second};
  if (previous_grad_norm) j["previous_grad_norm"] = *previous_grad_norm;
  if (!base_model.is_null()) j["base_model"] = base_model;
  if (lora)
    j["lora"] = {{"rank", lora->rank}, {"alpha", lora->alpha}, {"unet", lora->denoiser},
                 {"text_encoders", lora->text_encoders}, {"dropout", lora->dropout}};
  if (loss_scaler)
    j["loss_scaler"] = {{"scale", loss_scaler->scale}, {"iter", loss_scaler->iter},
                        {"last_overflow", loss_scaler->last_overflow}, {"hysteresis", loss_scaler->hysteresis},
                        {"skipped", loss_scaler->skipped}};
  return j;
}

CheckpointMeta CheckpointMeta::from_json(const json& j, const std::string& where) {
  CheckpointMeta m;
  const char* key = "";
  // Each key read through `get` (its default where older checkpoints lack it), so an error names it.
  auto refuse = [&](const json& v) {
    throw Error(ErrorKind::checkpoint, where + ": meta.json key '" + key + "' is not what ZeroStudio wrote (expected an "
                                           "integer, found " + v.dump() + "); resume from another checkpoint");
  };
  auto get = [&](const char* k, auto fallback) {
    key = k;
    using T = decltype(fallback);
    // An integer key holds an integer: nlohmann would cast a float such as 1e56 (undefined behaviour).
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      if (j.contains(k) && !j[k].is_null() && !j[k].is_number_integer()) refuse(j[k]);
    return j.value(k, fallback);
  };
  auto integer = [&](const json& v) {
    if (!v.is_number_integer()) refuse(v);
    return v.get<std::int64_t>();
  };
  auto has = [&](const char* k) {
    key = k;
    return j.contains(k) && !j[k].is_null();
  };
  try {
    m.step = get("step", std::int64_t{0});
    m.optimizer_steps = get("optimizer_steps", m.step);
    m.batches_consumed = get("batches_consumed", std::int64_t{0});
    if (has("samples_seen")) m.samples_seen = integer(j[key]);
    m.epoch = get("epoch", 0.0);
    m.loss = get("loss", 0.0);
    m.smoothed_loss = get("smoothed_loss", 0.0);
    if (has("smoothed_state")) m.smoothed_state = {j[key].at(0).get<double>(), integer(j[key].at(1))};
    if (has("val_loss")) m.val_loss = j[key].get<double>();
    if (has("previous_grad_norm")) m.previous_grad_norm = j[key].get<double>();
    m.val_loss_step = get("val_loss_step", std::int64_t{-1});
    m.lr = get("lr", 0.0);
    m.time = get("time", 0.0);
    m.reason = get("reason", std::string());
    m.world_size = get("world_size", 1);
    m.stage = get("stage", 0);
    m.precision = get("precision", std::string());
    m.config_hash = get("config_hash", std::string());
    m.config = get("config", std::string());
    if (has("sharding")) m.sharding = j[key];
    if (has("base_model")) m.base_model = j[key];
    if (has("lora")) {
      const json& l = j[key];
      key = "lora";
      m.lora = LoraMeta{l.contains("rank") ? integer(l["rank"]) : 0, l.value("alpha", 0.0), l.value("unet", false),
                        l.value("text_encoders", false), l.value("dropout", 0.0)};
    }
    if (has("loss_scaler")) {
      const json& s = j[key];
      m.loss_scaler = LossScalerMeta{s.value("scale", 0.0), s.value("iter", std::int64_t{0}),
                                     s.value("last_overflow", std::int64_t{-1}), s.value("hysteresis", 1),
                                     s.value("skipped", std::int64_t{0})};
    }
  } catch (const json::exception& e) {
    throw Error(ErrorKind::checkpoint, where + ": meta.json key '" + key + "' is not what ZeroStudio wrote (" + e.what() +
                                           "); resume from another checkpoint");
  }
  return m;
}

}  // namespace zs::checkpoint
