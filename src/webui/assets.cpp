// webui/assets.cpp — lookup over the generated table of embedded files.
#include "webui/assets.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace cairn::webui {

// Defined in the generated assets_data.cpp (see embed_assets.cmake).
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  std::size_t size;
};
extern const EmbeddedFile kEmbeddedFiles[];
extern const std::size_t kEmbeddedFileCount;

namespace {

std::string_view content_type_of(std::string_view name) {
  struct Type {
    std::string_view ext;
    std::string_view type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".json", "application/json"},
  };
  for (const auto& t : kTypes)
    if (name.size() >= t.ext.size() && name.substr(name.size() - t.ext.size()) == t.ext)
      return t.type;
  return "application/octet-stream";
}

// FNV-1a: a stable validator for ETag; not a security property.
std::string etag_of(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"%016llx\"", static_cast<unsigned long long>(h));
  return buf;
}

struct Table {
  std::vector<std::string> etags;  // owns the strings the assets view
  std::vector<Asset> assets;
};

const Table& table() {
  static const Table t = [] {
    Table t;
    t.etags.reserve(kEmbeddedFileCount);
    for (std::size_t i = 0; i < kEmbeddedFileCount; ++i) {
      const auto& f = kEmbeddedFiles[i];
      t.etags.push_back(etag_of({reinterpret_cast<const char*>(f.data), f.size}));
    }
    for (std::size_t i = 0; i < kEmbeddedFileCount; ++i) {
      const auto& f = kEmbeddedFiles[i];
      t.assets.push_back({f.name,
                          content_type_of(f.name),
                          {reinterpret_cast<const char*>(f.data), f.size},
                          t.etags[i]});
    }
    return t;
  }();
  return t;
}

}  // namespace

std::optional<Asset> find_asset(std::string_view name) {
  for (const auto& a : table().assets)
    if (a.name == name) return a;
  return std::nullopt;
}

const std::vector<Asset>& all_assets() { return table().assets; }

}  // namespace cairn::webui
