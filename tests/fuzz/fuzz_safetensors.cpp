// Fuzz target: a safetensors file, byte for byte (io/safetensors.h): the 8-byte header length,
// the header JSON (dtypes, shapes, offsets, metadata), the data section. Every tensor the header
// lists is read whole and as a slice.
#include <algorithm>

#include <ATen/ATen.h>

#include "fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zs::fuzz::initialize([] {
    zs::fuzz::Seeds seeds;
    for (const char* f : {"adafactor.safetensors", "bnb_blockwise.safetensors", "qwen_lora_alpha.safetensors",
                          "flux_pipeline.safetensors"})
      seeds.emplace_back(f, zs::fuzz::read_file(zs::fuzz::fixture(f)));
    return seeds;
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path =
      zs::fuzz::write_file("input.safetensors", {reinterpret_cast<const char*>(data), size});
  zs::fuzz::expect_accept_or_refuse([&] {
    const zs::io::SafetensorsReader r(path);
    for (const auto& e : r.entries()) {
      (void)r.contains(e.name);
      const at::Tensor t = r.tensor(e.name);
      if (t.numel() != e.numel()) std::abort();
      (void)r.slice(e.name, 0, std::min<std::int64_t>(e.numel(), 3));
      if (e.numel() > 1) (void)r.slice(e.name, e.numel() - 1, 1);
    }
  });
  return 0;
}
