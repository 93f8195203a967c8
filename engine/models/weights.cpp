#include "models/weights.h"

#include <filesystem>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "io/safetensors.h"

namespace zs::models {

WeightFiles::~WeightFiles() = default;
WeightFiles::WeightFiles(WeightFiles&&) noexcept = default;

WeightFiles::WeightFiles(const std::vector<std::string>& files) {
  for (const auto& f : files) owned.push_back(std::make_unique<io::SafetensorsReader>(f));
  for (const auto& r : owned) view.push_back(r.get());
}

at::Tensor WeightFiles::find(const std::string& name) const {
  for (const auto* r : view)
    if (r->contains(name)) return r->weight(name);
  return {};
}
std::string shape_text(at::IntArrayRef s) {
  std::ostringstream o;
  o << '[';
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

std::int64_t numbered_blocks(const std::vector<std::string>& names, const std::string& head) {
  std::int64_t n = 0;
  for (const auto& name : names) {
    if (name.compare(0, head.size(), head) != 0) continue;
    const auto dot = name.find('.', head.size());
    if (dot == std::string::npos) continue;
    try {
      n = std::max<std::int64_t>(n, std::stoll(name.substr(head.size(), dot - head.size())) + 1);
    } catch (const std::exception&) {
    }
  }
  return n;
}

void expect_rows(const at::Tensor& t, std::int64_t rows, const std::string& key, const std::string& where) {
  if (t.dim() >= 1 && t.size(0) == rows) return;
  throw Error(ErrorKind::config, where + ": " + key + " has shape " + shape_text(t.sizes()) + "; this model needs " +
                                     std::to_string(rows) + " rows there (the file does not match its config: give " +
                                     "the config folder this file was made with)");
}

at::Tensor fused_rows(const at::Tensor& t, std::int64_t parts, std::int64_t index, std::int64_t rows_each,
                      const std::string& key, const std::string& where) {
  expect_rows(t, parts * rows_each, key, where);
  if (index < 0 || index >= parts)
    throw Error(ErrorKind::config, where + ": " + key + ": part " + std::to_string(index) + " of " + std::to_string(parts));
  return t.narrow(0, index * rows_each, rows_each).contiguous();
}

LoadReport load_weights(torch::nn::Module& module, const io::SafetensorsReader& reader, const std::string& prefix) {
  return load_weights(module, std::vector<const io::SafetensorsReader*>{&reader}, prefix);
}

namespace {

/// Copies every parameter and buffer of `module` from what `resolve` gives for its name (the
/// key it was found under and the tensor; an undefined tensor when absent). Nothing is copied
/// unless everything fits; the error names `where` and every problem.
void load_resolved(torch::nn::Module& module, const std::function<std::pair<std::string, at::Tensor>(const std::string&)>& resolve,
                   const std::string& where, const std::function<bool(const std::string&)>& skip = {}) {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // destination, source
  std::vector<std::string> problems;
  auto visit = [&](const std::string& name, at::Tensor& dst) {
    if (skip && skip(name)) return;
    auto [key, src] = resolve(name);
    if (!src.defined()) {
      problems.push_back("missing tensor " + key + " " + shape_text(dst.sizes()));
      return;
    }
    // A linear layer stored as a 1x1 convolution ([out, in, 1, 1]), as older VAE files have it.
    if (src.dim() == 4 && dst.dim() == 2 && src.size(2) == 1 && src.size(3) == 1) src = src.flatten(1);
    if (src.sizes() != dst.sizes()) {
      problems.push_back(key + " has shape " + shape_text(src.sizes()) + ", the model needs " + shape_text(dst.sizes()));
      return;
    }
    copies.emplace_back(dst, std::move(src));
  };
  for (auto& item : module.named_parameters(true)) visit(item.key(), item.value());
  for (auto& item : module.named_buffers(true)) visit(item.key(), item.value());
  if (!problems.empty()) {
    std::string msg = where + ": does not fit the model (" + std::to_string(problems.size()) + " problem" +
                      (problems.size() == 1 ? "" : "s") + "):";
    for (std::size_t i = 0; i < problems.size() && i < 20; ++i) msg += "\n  " + problems[i];
    if (problems.size() > 20) msg += "\n  ... and " + std::to_string(problems.size() - 20) + " more";
    msg += "\nCheck that the weights belong to this model's config.json.";
    throw Error(ErrorKind::checkpoint, msg);
  }
  c10::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src);
}

}  // namespace

LoadReport load_weights(torch::nn::Module& module, const std::vector<const io::SafetensorsReader*>& readers,
                        const std::string& prefix, const NameAliases& aliases) {
  std::set<std::string> used;
  auto find = [&](const std::string& key) -> const io::SafetensorsReader* {
    for (const auto* r : readers)
      if (r->contains(key)) return r;
    return nullptr;
  };
  const std::string where = readers.size() == 1 ? readers[0]->path()
                                                : readers.front()->path() + " (and " + std::to_string(readers.size() - 1) + " more shards)";
  load_resolved(module, [&](const std::string& name) -> std::pair<std::string, at::Tensor> {
    std::string key = prefix + name;
    const io::SafetensorsReader* reader = find(key);
    if (!reader && aliases)
      for (const std::string& alt : aliases(key))
        if ((reader = find(alt))) {
          key = alt;
          break;
        }
    if (!reader) return {prefix + name, {}};
    used.insert(key);
    return {key, reader->weight(key)};
  }, where);
  LoadReport report;
  for (const auto* r : readers)
    for (const auto& e : r->entries())
      if (e.name.rfind(prefix, 0) == 0 && !used.count(e.name) && !r->is_quantization_extra(e.name))
        report.unexpected.push_back(e.name);
  return report;
}

void load_weights(torch::nn::Module& module, const TensorLookup& lookup, const std::string& where,
                  const std::function<bool(const std::string&)>& skip) {
  load_resolved(module, [&](const std::string& name) { return std::make_pair(name, lookup(name)); }, where, skip);
}

void save_weights(const torch::nn::Module& module, const std::string& path, const std::string& prefix,
                  const std::map<std::string, std::string>& metadata, std::optional<at::ScalarType> dtype) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : module.named_parameters(true))
    tensors.emplace_back(prefix + item.key(), dtype ? item.value().detach().to(*dtype) : item.value().detach());
  for (const auto& item : module.named_buffers(true)) tensors.emplace_back(prefix + item.key(), item.value().detach());
  io::write_safetensors(path, tensors, metadata);
}

bool weights_file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::int64_t parameter_count(const torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace zs::models
