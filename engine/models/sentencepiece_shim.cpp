// A C interface to Debian's libsentencepiece, built as its own module (libzs_sentencepiece.so) and
// loaded by models/t5_tokenizer.cpp with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). libsentencepiece.so.0
// carries its own copy of protobuf-lite and exports its symbols; linked into the program next to
// LibTorch's libprotobuf.so.32 the two copies interpose each other and the program crashes before
// main (libprotobuf's static init calls sentencepiece's MergeFromImpl). Loaded locally and bound
// deeply, sentencepiece keeps to its own copy and nothing else sees it.

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

void put_error(char* error, std::size_t size, const std::string& message) {
  if (!error || size == 0) return;
  const std::size_t n = std::min(size - 1, message.size());
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* zs_spm_open(const char* path, char* error, std::size_t error_size) {
  auto* sp = new (std::nothrow) sentencepiece::SentencePieceProcessor();
  if (!sp) {
    put_error(error, error_size, "out of memory");
    return nullptr;
  }
  const auto status = sp->Load(path);
  if (!status.ok()) {
    put_error(error, error_size, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void zs_spm_close(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

__attribute__((visibility("default"))) int zs_spm_piece_size(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

/// 0: pad, 1: eos, 2: unk.
__attribute__((visibility("default"))) int zs_spm_special_id(void* handle, int which) {
  const auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  return which == 0 ? sp->pad_id() : which == 1 ? sp->eos_id() : sp->unk_id();
}

/// Encodes `text` into at most `capacity` ids; `*count` receives how many there are (call again
/// with a larger buffer when it exceeds `capacity`). Returns 0, or −1 with `error` set.
__attribute__((visibility("default"))) int zs_spm_encode(void* handle, const char* text, std::size_t length, int* ids,
                                                         std::size_t capacity, std::size_t* count, char* error,
                                                         std::size_t error_size) {
  std::vector<int> out;
  const auto status =
      static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(std::string(text, length), &out);
  if (!status.ok()) {
    put_error(error, error_size, status.ToString());
    return -1;
  }
  *count = out.size();
  std::copy_n(out.begin(), std::min(capacity, out.size()), ids);
  return 0;
}

}  // extern "C"
