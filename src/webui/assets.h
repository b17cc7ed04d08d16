// webui/assets.h — the browser chat page's files (HTML, CSS, JavaScript),
// compiled into the binary from src/webui/ by embed_assets.cmake at build time.
// Owns the lookup by file name, each file's content type and ETag. Must never
// read files at run time or know about HTTP routing (api/ maps URLs to names).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace cairn::webui {

struct Asset {
  std::string_view name;          // "index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view bytes;
  std::string_view etag;  // quoted, a hash of the bytes
};

// The file called `name` (no folders), or nothing.
std::optional<Asset> find_asset(std::string_view name);

// Every embedded file, for sizes and tests.
const std::vector<Asset>& all_assets();

}  // namespace cairn::webui
