#pragma once
// The UNets the CPU benchmarks train (bench_zero_step's table; bench_offload_host's whole steps
// use its "large" model).

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/sd/unet_config.h"

namespace zs::bench {

struct ModelSpec {
  std::string name, channels, heads, down;
  int cin, cross, groups, layers, res, batch;
};

inline const std::vector<ModelSpec>& specs() {
  static const std::vector<ModelSpec> all = {
      {"tiny", "32,64,96", "2,4,4", "D,C,C", 3, 64, 8, 1, 16, 16},
      {"large", "80,160,320,320", "8,8,8,8", "C,C,C,D", 4, 256, 16, 2, 16, 2},
  };
  return all;
}

inline std::vector<std::int64_t> ints(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(std::stoll(x));
  return out;
}

inline models::UNetConfig config_of(const ModelSpec& m) {
  models::UNetConfig c;
  c.in_channels = c.out_channels = m.cin;
  c.block_out_channels = ints(m.channels);
  c.num_attention_heads = ints(m.heads);
  c.down_block_types.clear();
  c.up_block_types.clear();
  std::stringstream ss(m.down);
  for (std::string d; std::getline(ss, d, ',');) c.down_block_types.push_back(d == "C" ? "CrossAttnDownBlock2D" : "DownBlock2D");
  for (auto it = c.down_block_types.rbegin(); it != c.down_block_types.rend(); ++it)
    c.up_block_types.push_back(*it == "CrossAttnDownBlock2D" ? "CrossAttnUpBlock2D" : "UpBlock2D");
  c.transformer_layers_per_block.assign(c.block_out_channels.size(), 1);
  c.cross_attention_dim = m.cross;
  c.norm_num_groups = m.groups;
  c.layers_per_block = m.layers;
  return c;
}

/// The table's model named `name` (throws when there is none).
inline const ModelSpec& spec_named(const std::string& name) {
  for (const ModelSpec& m : specs())
    if (m.name == name) return m;
  throw std::runtime_error("no bench model named " + name);
}

}  // namespace zs::bench
