#!/bin/bash
# llama-cpp-python with CUDA on a lent GPU machine (`device`: nothing can be fetched there), for
# `benchmarks/device_latency.py --engine llama.cpp` (docs/gpu.md).
#
#   bash scripts/build_llama_cpp_cuda.sh pack CARRY    # here: what travels (sdist, wheels), ~6 MB
#   bash scripts/build_llama_cpp_cuda.sh build CARRY   # there: installs into /tmp/site (~4.5 min)
#
# pack: llama-cpp-python's sdist (the version this project pins), stripped of what a CUDA build
# does not read (the vendored llama.cpp's models, docs, tests, other GPU backends: 76 -> 6 MB),
# and the wheels that it and device_latency.py need and the GPU machine's image lacks
# (diskcache, gguf). build: installs those wheels, then builds llama-cpp-python from the sdist
# for the GPU found there (nvcc, cmake and ninja are in the image; 261-286 s on 16 cores for
# sm_90) and installs it. The wheel (254 MB) is larger than what a call brings back (64 MiB), so
# every fresh machine builds again; a warm one keeps /tmp/site between calls.
# Then: export PYTHONPATH=/tmp/site OMP_NUM_THREADS=1 (see docs/gpu.md).
set -euo pipefail
VERSION=0.3.36
mode=${1:?pack or build}
CARRY=${2:?a folder}
case $mode in
pack)
    mkdir -p "$CARRY/whl"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
    tar -xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
    src="$work/llama_cpp_python-$VERSION"
    (cd "$src" && rm -rf .git examples docs docker vendor/llama.cpp/.git \
        vendor/llama.cpp/{models,docs,benches,tests,examples,media,tools/ui} \
        vendor/llama.cpp/ggml/src/ggml-{opencl,sycl,vulkan,hexagon,metal,et,cann,musa,webgpu,zdnn,openvino})
    tar -czf "$CARRY/lcp-src.tgz" -C "$work" "llama_cpp_python-$VERSION"
    pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 -d "$CARRY/whl" diskcache==5.6.3 \
        "gguf==$(python -c 'import importlib.metadata as m; print(m.version("gguf"))')"
    du -sh "$CARRY"/lcp-src.tgz "$CARRY"/whl/*
    ;;
build)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$CARRY"/whl/*.whl
    t0=$(date +%s)
    tar -xzf "$CARRY/lcp-src.tgz" -C /tmp
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${arch:-90} -DLLAVA_BUILD=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip wheel -q --no-deps \
        --no-build-isolation --no-index -w /tmp/lcp-wheel "/tmp/llama_cpp_python-$VERSION"
    whl=$(ls /tmp/lcp-wheel/llama_cpp_python-*.whl)
    echo "built $(basename "$whl") ($(du -h "$whl" | cut -f1)) in $(($(date +%s) - t0)) s for sm_${arch:-90}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$whl"
    PYTHONPATH=/tmp/site python3 -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__,
        "gpu offload:", llama_cpp.llama_supports_gpu_offload())'
    ;;
*)
    echo "usage: $0 pack|build CARRY" >&2
    exit 2
    ;;
esac
