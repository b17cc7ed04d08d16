// `cairn gguf MODEL`: metadata and tensor table of a GGUF file, and whether
// cairn computes each tensor.
#include <cstdio>

#include "commands.h"
#include "gguf/gguf.h"
#include "gguf/gguf_dump.h"
#include "model/load.h"

namespace cairn::cli {

void register_gguf(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("gguf", "print a GGUF file's metadata and tensor table");
  auto path = std::make_shared<std::string>();
  cmd->add_option("MODEL", *path, "GGUF file")->required();
  cmd->callback([&result, path] {
    auto file = gguf::File::open(*path);
    if (!file.is_ok()) {
      result.status = file.status();  // already names the file
      return;
    }
    const std::string text = gguf::describe(**file, model::tensor_computable);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
}

}  // namespace cairn::cli
