# Writes OUT, a C++ source holding every web asset of DIR as a byte array
# (cmake -P, run by add_custom_command so editing an asset rebuilds). Plain
# CMake so the build needs no xxd.
file(GLOB files RELATIVE ${DIR} ${DIR}/*.html ${DIR}/*.js ${DIR}/*.css ${DIR}/*.svg ${DIR}/*.png)
list(SORT files)
set(arrays "")
set(rows "")
set(i 0)
foreach(name ${files})
  file(READ ${DIR}/${name} hex HEX)
  string(LENGTH "${hex}" n)
  math(EXPR size "${n} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  # A trailing zero keeps an empty file's array legal; size excludes it.
  string(APPEND arrays "const unsigned char k${i}[] = {${bytes}0x00};\n")
  string(APPEND rows "    {\"${name}\", k${i}, ${size}},\n")
  math(EXPR i "${i} + 1")
endforeach()
set(text "// Generated from src/webui/ by embed_assets.cmake: do not edit.
#include <cstddef>

namespace cairn::webui {
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  std::size_t size;
};
namespace {
${arrays}}  // namespace
extern const EmbeddedFile kEmbeddedFiles[] = {
${rows}    {nullptr, nullptr, 0},
};
extern const std::size_t kEmbeddedFileCount = ${i};
}  // namespace cairn::webui
")
file(WRITE ${OUT} "${text}")
