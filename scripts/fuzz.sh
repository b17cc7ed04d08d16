#!/usr/bin/env bash
# Fuzzes the GGUF reader and the ONNX model loader with libFuzzer for
# ${FUZZ_SECONDS:-60} seconds between them (the ONNX loader gets a third, or
# ${FUZZ_ONNX_SECONDS} when set), then the template engine and the request
# parser for ${FUZZ_EXTRA_SECONDS:-10} seconds each.
# Builds only the fuzz targets (clang, ASan+UBSan) in build-fuzz; exits non-zero
# on a finding, which is kept in build-fuzz/fuzz-findings/ for reproduction:
#   build-fuzz/fuzz/fuzz_gguf_reader build-fuzz/fuzz-findings/<file>
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-fuzz"
seconds=${FUZZ_SECONDS:-60}
onnx_seconds=${FUZZ_ONNX_SECONDS:-$((seconds / 3))}
gguf_seconds=$((seconds - onnx_seconds))
# libFuzzer reads -max_total_time=0 as "no limit": each gets at least 1s.
if [ "$onnx_seconds" -lt 1 ]; then onnx_seconds=1; fi
if [ "$gguf_seconds" -lt 1 ]; then gguf_seconds=1; fi

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCAIRN_FUZZ=ON -DCAIRN_TESTS=OFF -DCAIRN_TOOLS=OFF >/dev/null
ninja -C "$build" -j2 fuzz_gguf_reader gguf_fuzz_seeds chat_template_fuzz request_parser_fuzz \
  onnx_model_fuzz onnx_fuzz_seeds gbnf_fuzz schema_regex_fuzz tool_calls_fuzz

# The fuzzer grows its corpus in place, so it works on a copy.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/fuzz-findings"
"$build/fuzz/gguf_fuzz_seeds" "$work/corpus"
if [ -d "$root/fuzz/corpus/gguf" ]; then
  cp "$root"/fuzz/corpus/gguf/* "$work/corpus/" 2>/dev/null || true
fi

# The fuzz build's UBSan checks are recoverable; make the first report fatal so
# libFuzzer records it as a finding instead of printing it and going on.
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

echo "fuzz.sh: fuzzing the GGUF reader for ${gguf_seconds}s"
"$build/fuzz/fuzz_gguf_reader" \
  -max_total_time="$gguf_seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -dict="$root/fuzz/gguf.dict" -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-findings/" \
  "$work/corpus"

# The ONNX loader: seed models written by onnx_fuzz_seeds (the seeds' add
# and MatMul+Neg networks, an MLP, a CNN, shape arithmetic, constants).
mkdir -p "$work/onnx"
"$build/fuzz/onnx_fuzz_seeds" "$work/onnx"
echo "fuzz.sh: fuzzing the ONNX model loader for ${onnx_seconds}s"
"$build/fuzz/onnx_model_fuzz" \
  -max_total_time="$onnx_seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -dict="$root/fuzz/onnx_model.dict" -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-findings/onnx-" \
  "$work/onnx"

# The template engine, the HTTP request parser, the grammar parser, the JSON
# Schema and regex compilers and the tool-call parser get a shorter run each.
extra=${FUZZ_EXTRA_SECONDS:-10}
for target in chat_template_fuzz request_parser_fuzz gbnf_fuzz schema_regex_fuzz tool_calls_fuzz; do
  mkdir -p "$work/$target"
  dict=()
  case $target in
    chat_template_fuzz) [ -f "$root/fuzz/chat_template.dict" ] && dict=(-dict="$root/fuzz/chat_template.dict") ;;
    request_parser_fuzz) dict=(-dict="$root/fuzz/request_parser.dict") ;;
    tool_calls_fuzz) dict=(-dict="$root/fuzz/tool_calls.dict") ;;
    schema_regex_fuzz) dict=(-dict="$root/fuzz/schema_regex.dict") ;;
  esac
  echo "fuzz.sh: fuzzing $target for ${extra}s"
  "$build/fuzz/$target" -max_total_time="$extra" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    "${dict[@]}" -artifact_prefix="$build/fuzz-findings/$target-" "$work/$target"
done
echo "fuzz.sh: no findings"
