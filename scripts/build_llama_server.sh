#!/usr/bin/env bash
# Build llama.cpp's own HTTP server (`llama-server`) from the llama.cpp source vendored in the
# llama-cpp-python sdist on PyPI, and install it as $HYBRIDBENCH_CACHE/bin/llama-server
# (default ~/.cache/hybridbench/bin/llama-server), where tests/test_remote.py looks for it.
#
#   bash scripts/build_llama_server.sh           # ~2 CPU cores: run it under the heavy lock
#
# Why llama-server and not `python -m llama_cpp.server`: the remote backend (harness/backends/remote.py)
# sends token-id prompts and reads token ids back. llama-cpp-python 0.3.36's server declares
# `prompt: Union[str, List[str]]` (token-id lists are rejected) and keys its logprobs by
# detokenized strings, so it cannot carry an exact token-id protocol; llama-server (and vLLM's
# OpenAI server) take token-id prompts and return token ids with their log-probabilities.
# Nothing is fetched but the sdist itself: the web UI is not embedded (no download at build time).
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${HYBRIDBENCH_CACHE:-$HOME/.cache/hybridbench}"
JOBS="${JOBS:-$(nproc)}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==${VERSION}" -d "$WORK"
tar -xzf "$WORK"/llama_cpp_python-"${VERSION}".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-${VERSION}/vendor/llama.cpp"

cmake -S "$SRC" -B "$WORK/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
cmake --build "$WORK/build" --target llama-server -j "$JOBS"

mkdir -p "$CACHE/bin"
install -m 0755 "$WORK/build/bin/llama-server" "$CACHE/bin/llama-server"
"$CACHE/bin/llama-server" --version 2>&1 | head -n 2
echo "installed $CACHE/bin/llama-server (llama.cpp from llama-cpp-python ${VERSION})"
