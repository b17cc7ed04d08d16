// libFuzzer target: File::parse on arbitrary bytes must return a Status, never
// crash, hang or allocate without bound; on success every accessor and the
// dump must stay inside the buffer.
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/gguf.h"
#include "gguf/gguf_dump.h"

namespace {

volatile uint8_t g_sink;  // keeps the tensor reads from being optimised away

void exercise(const cairn::gguf::File& f) {
  for (const cairn::gguf::KeyValue& kv : f.metadata()) {
    (void)f.get_uint(kv.key);
    (void)f.get_int(kv.key);
    (void)f.get_float(kv.key);
    (void)f.get_bool(kv.key);
    (void)f.get_string(kv.key);
    (void)f.get_string_array(kv.key);
    (void)f.get_float_array(kv.key);
    (void)f.get_int_array(kv.key);
  }
  for (const cairn::gguf::TensorInfo& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    if (t.n_bytes > 0) g_sink = t.data[0] ^ t.data[t.n_bytes - 1];
  }
  (void)cairn::gguf::describe(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = cairn::gguf::File::parse(std::span<const uint8_t>(data, size));
  if (file.is_ok()) {
    exercise(**file);
  } else if (file.status().message().empty()) {
    __builtin_trap();  // every failure must say why
  }
  return 0;
}
