#pragma once
// What every fuzz target shares (tests/fuzz/README.md): a scratch folder of its own, the
// fixtures, the oracle, safetensors files made from a fuzzed header, and the seed corpus.
//
// The oracle: a parser may accept its input or refuse it with zs::Error (config::ConfigError is
// one), or with std::filesystem::filesystem_error (the system refused a path; the CLI names it).
// Anything else escaping it is what the CLI prints as "unexpected failure ... Please report this"
// and counts as a finding here (the target aborts), as do the sanitizers' reports.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace zs::fuzz {

/// This process's scratch folder (made at first use, removed at exit).
const std::string& scratch();
/// tests/fixtures/`rel` in the source tree.
std::string fixture(const std::string& rel);
/// ../shared/fixtures/`rel`; empty when the shared folder is absent (its slots are then skipped).
std::string shared_fixture(const std::string& rel);

/// Writes `bytes` to scratch()/`name` (folders made) and returns the path.
std::string write_file(const std::string& name, std::string_view bytes);
std::string read_file(const std::string& path);
/// Copies a folder into scratch()/`name` once and returns the copy's path.
std::string copy_folder(const std::string& from, const std::string& name);

/// A safetensors file at scratch()/`name` whose header is `header` (the fuzzed part) and whose
/// data section is as long as the header's largest "data_offsets" end asks (at most 16 MiB; a
/// header that is no JSON gets none), filled with small floats' bytes. Returns the path.
std::string safetensors_from_header(const std::string& name, std::string_view header);
/// The header JSON of a safetensors file (the bytes after its 8-byte length).
std::string safetensors_header(const std::string& path);

/// Runs `parse` under the oracle above: returns normally on acceptance or a refusal; aborts with
/// the exception's type and message otherwise.
void expect_accept_or_refuse(const std::function<void()>& parse);

/// A target's seed corpus: its inputs, each with a name.
using Seeds = std::vector<std::pair<std::string, std::string>>;
/// Call from LLVMFuzzerInitialize. With ZS_FUZZ_WRITE_SEEDS=DIR in the environment, writes
/// `make_seeds()` into DIR and exits (make fuzz builds each target's corpus this way from the
/// fixtures); otherwise returns.
void initialize(const std::function<Seeds()>& make_seeds);

}  // namespace zs::fuzz
