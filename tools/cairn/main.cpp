// cairn — the command-line entry point (subcommands are filled in per issue).
#include <cstdio>

int main() {
  std::fprintf(stderr, "cairn: no subcommands yet\n");
  return 1;
}
