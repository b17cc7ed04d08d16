#!/usr/bin/env python3
"""Fails when a file in src/ includes a layer it may not use.

The layers and what each may use come from src/CMakeLists.txt itself (every
`cairn_layer(NAME DEPS ...)` line): a file in src/A/ may include src/B/ only if
cairn_B is among A's dependencies, directly or through other layers, and may
include generated protobuf headers ("cairn/v1/...") only if cairn_proto is.
So the link graph and the include graph cannot drift apart. The check also
fails on a folder of src/ with no cairn_layer line and on a dependency cycle.

Usage: check_layer_includes.py SOURCE_ROOT
"""
import pathlib
import re
import sys


def read_layers(cmake_text):
    deps = {}
    for m in re.finditer(r"cairn_layer\((\w+)([^)]*)\)", cmake_text):
        name, rest = m.group(1), m.group(2)
        words = rest.split()
        listed = words[words.index("DEPS") + 1:] if "DEPS" in words else []
        deps[name] = {w[len("cairn_"):] for w in listed if w.startswith("cairn_")}
    return deps


def closure(deps, layer, seen_path=()):
    if layer in seen_path:
        raise ValueError("dependency cycle: " + " -> ".join(seen_path + (layer,)))
    out = set()
    for d in deps.get(layer, ()):
        out.add(d)
        out |= closure(deps, d, seen_path + (layer,))
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    src = root / "src"
    deps = read_layers((src / "CMakeLists.txt").read_text())
    problems = []
    try:
        allowed = {layer: closure(deps, layer) for layer in deps}
    except ValueError as e:
        print("check_layer_includes: " + str(e))
        return 1
    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    for folder in folders:
        if folder not in deps:
            problems.append(f"src/{folder}/ has no cairn_layer({folder} ...) in src/CMakeLists.txt")
    include = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
    checked = 0
    for folder in folders:
        if folder not in deps:
            continue
        for path in sorted((src / folder).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".inc", ".hpp"):
                continue
            checked += 1
            for m in include.finditer(path.read_text(errors="replace")):
                target = m.group(1).split("/")[0] if "/" in m.group(1) else None
                if target is None or target == folder:
                    continue
                needed = "proto" if target == "cairn" else target
                if needed not in deps and needed != "proto":
                    continue  # not one of ours (a system or generated path)
                if needed not in allowed[folder]:
                    line = path.read_text(errors="replace")[: m.start()].count("\n") + 1
                    problems.append(
                        f"{path.relative_to(root)}:{line}: includes \"{m.group(1)}\", but layer "
                        f"'{folder}' does not depend on '{needed}' (src/CMakeLists.txt)")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layer_includes: {len(problems)} problem(s)")
        return 1
    order = []
    for layer in sorted(deps, key=lambda l: (len(allowed[l]), l)):
        order.append(layer)
    print(f"check_layer_includes: {checked} files, no include goes up a layer; layers from the "
          f"bottom: {' '.join(order)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
