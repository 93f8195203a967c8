#pragma once
// Model folders for tests that need more than the sd15-tiny fixture (built with random weights).

#include <string>

namespace zs::test {

/// A tiny SDXL pipeline folder with random weights in Stable Diffusion's standard proportions
/// (group norm 32, 64-channel attention heads, so a single file of it infers the same configs):
/// an SDXL-shaped UNet (text_time add_embedding), a VAE, a CLIPTextModel and a
/// CLIPTextModelWithProjection; the sd15-tiny fixture's tokenizer twice (the second padding with
/// "!" as SDXL's tokenizer_2 does) and scheduler. Needs the shared fixtures.
void write_tiny_sdxl(const std::string& dir);

}  // namespace zs::test
