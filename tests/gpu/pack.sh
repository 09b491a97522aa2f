#!/bin/sh
# pack.sh: gather what tests/gpu/run-all.sh needs on the GPU machine into one
# folder (default build-gpu/, ignored by git) from a build made here with
# --with-cuda: the program, the GPU test and benchmark programs, CMocka's
# shared library (the GPU machine has none), the PyTorch adapter's C core
# (when the build has it) and the IDX training images
# (it has no data set either), with run-all.sh and the PyTorch comparison's
# scripts (torch_models.py, torch_compare.sh, gpu_speed.sh, cpu_speed.sh,
# cpu_ab.sh, cpu_tracer_parts.sh) at
# the top.
# Usage: tests/gpu/pack.sh [BUILD [DEST]]
set -eu
B=${1:-build}
D=${2:-build-gpu}
rm -rf "$D"
mkdir -p "$D/bin" "$D/lib" "$D/data"
make -C "$B" -j2 src/divtrace tests/bench/bench_gpu_step tests/bench/bench_gpu_hash tests/bench/bench_gpu_fused_hash tests/bench/bench_gpu_leaf_layout tests/bench/bench_gpu_profile tests/bench/bench_cudnn_engines \
    tests/gpu/test_gpu_trace tests/gpu/test_gpu_trace_paths tests/gpu/test_gpu_ops tests/gpu/test_gpu_dnn \
    tests/gpu/test_lib_gpu tests/bench/bench_lib_step tests/bench/bench_gemm tests/bench/bench_cpu_step \
    tests/test_cpu_gemm tests/test_stats tests/test_conv_cache tests/test_conv tests/test_image_ops tests/test_tracer_async \
    tests/test_tracer_defer >/dev/null
cp "$B/src/divtrace" "$B/tests/bench/bench_gpu_step" "$B/tests/bench/bench_gpu_hash" "$B/tests/bench/bench_gpu_profile" \
    "$B/tests/bench/bench_gpu_fused_hash" "$B/tests/bench/bench_gpu_leaf_layout" "$B/tests/bench/bench_cudnn_engines" \
    "$B/tests/gpu/test_gpu_trace" "$B/tests/gpu/test_gpu_trace_paths" "$B/tests/gpu/test_gpu_ops" \
    "$B/tests/gpu/test_gpu_dnn" "$B/tests/bench/bench_gemm" "$B/tests/bench/bench_cpu_step" "$D/bin/"
# the CPU kernels' tests: the GPU machine's CPU has AVX-512, which CI's may lack;
# the tracer's threads on its 16 cores
cp "$B/tests/test_cpu_gemm" "$B/tests/test_stats" "$B/tests/test_conv_cache" "$B/tests/test_conv" "$B/tests/test_image_ops" \
    "$B/tests/test_tracer_async" "$B/tests/test_tracer_defer" "$D/bin/"
# libdivtrace's GPU test and benchmark (linked -no-install: plain binaries) and the library
cp "$B/tests/gpu/test_lib_gpu" "$B/tests/bench/bench_lib_step" "$D/bin/"
cp -L "$B/src/.libs/libdivtrace.so.0" "$D/lib/"
# the PyTorch adapter's C core, where the package looks beside the library
if make -C "$B" src/python/_fast.la >/dev/null 2>&1 && [ -e "$B/src/python/.libs/_fast.so" ]; then
    cp "$B/src/python/.libs/_fast.so" "$D/lib/"
fi
# a libdivtrace that records nothing: the PyTorch adapter's own cost
cc -std=c11 -O2 -shared -fPIC -I"$(dirname "$0")/../../src" -o "$D/lib/libdivtrace_null.so" \
    "$(dirname "$0")/../bench/divtrace_null.c"
for l in libcmocka.so.0; do
    p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" "$D/lib/"
done
cp /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz "$D/data/"
# symbols off: the device tool carries at most 64 MiB with the source tree
command -v strip >/dev/null && strip "$D"/bin/* "$D"/lib/libdivtrace.so.0
cp tests/gpu/run-all.sh tests/bench/torch_models.py tests/bench/torch_compare.sh tests/bench/gpu_speed.sh \
    tests/bench/cpu_speed.sh tests/bench/cpu_ab.sh tests/bench/cpu_tracer_parts.sh "$D/" 2>/dev/null || true
du -sh "$D"
