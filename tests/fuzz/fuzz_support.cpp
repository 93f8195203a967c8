#include "fuzz_support.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <typeinfo>

#include <cxxabi.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace zs::fuzz {

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "zs-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::perror("zs fuzz: mkdtemp");
      std::abort();
    }
    path = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    io::remove_tree(path, ec);
  }
};

std::string demangled(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

}  // namespace

const std::string& scratch() {
  static Scratch s;
  return s.path;
}

std::string fixture(const std::string& rel) { return std::string(ZS_FUZZ_FIXTURES) + "/" + rel; }

std::string shared_fixture(const std::string& rel) {
  const fs::path p = fs::path(ZS_FUZZ_SHARED) / "fixtures" / rel;
  std::error_code ec;
  return fs::exists(p, ec) ? p.string() : std::string();
}

std::string write_file(const std::string& name, std::string_view bytes) {
  const fs::path p = fs::path(scratch()) / name;
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::cerr << "zs fuzz: cannot write " << p << "\n";
    std::abort();
  }
  return p.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "zs fuzz: cannot read " << path << "\n";
    std::abort();
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string copy_folder(const std::string& from, const std::string& name) {
  const fs::path to = fs::path(scratch()) / name;
  if (!fs::exists(to)) fs::copy(from, to, fs::copy_options::recursive);
  return to.string();
}

std::string safetensors_from_header(const std::string& name, std::string_view header) {
  std::uint64_t data_bytes = 0;
  const nlohmann::json j = nlohmann::json::parse(header.begin(), header.end(), nullptr, false);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (!value.is_object() || !value.contains("data_offsets")) continue;
      const auto& offsets = value["data_offsets"];
      if (offsets.is_array() && offsets.size() == 2 && offsets[1].is_number_unsigned())
        data_bytes = std::max<std::uint64_t>(data_bytes, offsets[1].get<std::uint64_t>());
    }
  }
  data_bytes = std::min<std::uint64_t>(data_bytes, 16u << 20);
  std::string file(8 + header.size() + data_bytes, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::copy(header.begin(), header.end(), file.begin() + 8);
  // Small, finite values in every float layout: 0x3c (fp16 ~1, bf16/fp32 exponent bytes) alternated with 0.
  for (std::uint64_t i = 0; i < data_bytes; ++i) file[8 + n + i] = (i % 2) ? '\x3c' : '\0';
  return write_file(name, file);
}

std::string safetensors_header(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 8) return {};
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return bytes.substr(8, std::min<std::uint64_t>(n, bytes.size() - 8));
}

void expect_accept_or_refuse(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const zs::Error&) {
    // a refusal naming the file or key: what the input deserves
  } catch (const fs::filesystem_error&) {
    // the system refused a path: the CLI prints it as such
  } catch (const std::exception& e) {
    std::cerr << "zs fuzz: finding: an exception the CLI reports as \"unexpected failure\": "
              << demangled(typeid(e).name()) << ": " << e.what() << "\n";
    std::abort();
  } catch (...) {
    std::cerr << "zs fuzz: finding: a non-standard exception escaped\n";
    std::abort();
  }
}

void initialize(const std::function<Seeds()>& make_seeds) {
  const char* dir = std::getenv("ZS_FUZZ_WRITE_SEEDS");
  if (!dir || !*dir) return;
  fs::create_directories(dir);
  const Seeds seeds = make_seeds();
  for (const auto& [name, bytes] : seeds) {
    std::ofstream out(fs::path(dir) / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::cout << "zs fuzz: " << seeds.size() << " seeds in " << dir << "\n";
  std::exit(0);
}

}  // namespace zs::fuzz
