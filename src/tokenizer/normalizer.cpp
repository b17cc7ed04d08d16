// Unicode normalization before pre-tokenization, with utf8proc's data.
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <cstring>

#include "tokenizer/utf8.h"

namespace cairn::tok {

Normalization bpe_normalization(std::string_view pre) {
  if (pre == "qwen2") return Normalization::Nfc;
  return Normalization::None;
}

bool is_ascii(std::string_view text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return false;
  }
  return true;
}

namespace {

// NFC of a run that is valid UTF-8; on any utf8proc error the run is kept.
void append_nfc_run(std::string_view run, std::string& out) {
  if (run.empty()) return;
  if (is_ascii(run)) {
    out.append(run);
    return;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0 || dst == nullptr) {
    out.append(run);
  } else {
    out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  }
  std::free(dst);
}

}  // namespace

std::string nfc(std::string_view text) {
  if (is_ascii(text)) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t run_start = 0, i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(text.substr(i));
    if (st.kind == Utf8Scan::Complete) {
      i += st.len;
      continue;
    }
    // Invalid (or truncated at the end) bytes: normalize what came before,
    // keep these bytes as they are.
    append_nfc_run(text.substr(run_start, i - run_start), out);
    const size_t len = st.len == 0 ? 1 : st.len;
    out.append(text.substr(i, len));
    i += len;
    run_start = i;
  }
  append_nfc_run(text.substr(run_start), out);
  return out;
}

}  // namespace cairn::tok
