#!/usr/bin/env bash
# Fills .gpu/ (git-ignored) with what scripts/gpu_check.sh (and gpu_probe.sh) need on the GPU machine,
# from a build folder of this machine: .gpu/bin/{launch,train_resnet,test_worker_gpu,gpu_model_driver}
# (and cudnn_fusion_probe, data_driver... when built)
# and .gpu/lib/ with the shared libraries the GPU machine lacks (libgomp, libfmt, nvJPEG's
# libnvjpeg.so.13, Debian's libjpeg.so.62, libpng16 and libcurl with what it loads; CUDA, cuDNN
# and NCCL come from the machine's torch wheel folders, see ../shared/DEVICE.md).
# Usage: scripts/gpu_pack.sh [--xz] [BUILD_DIR]   (default build; build the four targets first)
# Then, on the GPU machine, with carry [".gpu"]: scripts/gpu_check.sh
# --xz: also strips the binaries and writes .gpuz/gpu.tar.xz (89 MB of binaries and libraries in
# 13 MB, where the device tool carries 64 MiB): carry [".gpuz"] and unpack it there first with
#   python3 -c 'import tarfile; tarfile.open(".gpuz/gpu.tar.xz").extractall(".gpu")'
xz=0
if [ "${1:-}" = --xz ]; then xz=1; shift; fi
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"
[[ "$build" == /* ]] || build="$root/$build"
bins=(launch train_resnet test_worker_gpu gpu_model_driver)
for b in "${bins[@]}"; do
  if [ ! -x "$build/bin/$b" ]; then
    echo "gpu_pack: $build/bin/$b is missing: build it first (cmake --build $build -j2 --target ${bins[*]})" >&2
    exit 1
  fi
done
# Staged outside the tree, then swapped in: .gpu/ is never half-written.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib"
for b in "${bins[@]}"; do cp "$build/bin/$b" "$tmp/bin/"; done
# The image pipeline's GPU test and benchmark driver (issue 11) and the cuDNN fusion probe
# (scripts/gpu_probe.sh; EXCLUDE_FROM_ALL), when built.
for b in test_worker_gpu_data data_driver data_bench cudnn_fusion_probe; do
  if [ -x "$build/bin/$b" ]; then cp "$build/bin/$b" "$tmp/bin/"; bins+=("$b"); fi
done
# Every non-system library the binaries load that is not CUDA/cuDNN/NCCL/cuBLAS.
# Everything the binaries load but glibc, the compiler's runtime and CUDA's own libraries (the
# machine has those): libgomp, libfmt, nvJPEG, libjpeg, libpng, and libcurl with its closure
# (launch's etcd client: libssh2, libnghttp2, GnuTLS, Kerberos, ... are not on the GPU machine).
libs=$(for b in "${bins[@]}"; do ldd "$build/bin/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
       grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so|/lib(cuda|cudart|cudnn|nccl|cublas|cublasLt|nvrtc|nvJitLink|cufft|curand|cusolver|cusparse|cupti)[^/]*\.so' || true)
for l in $libs; do cp -L "$l" "$tmp/lib/"; done
# The CUPTI profile (bench/cupti_trace.cpp), with the CUPTI it was built against, when built:
#   CUDA_INJECTION64_PATH=$PWD/.gpu/lib/libcupti_trace.so .gpu/bin/train_resnet ...
if [ -f "$build/lib/libcupti_trace.so" ]; then
  cp "$build/lib/libcupti_trace.so" "$tmp/lib/"
  ldd "$build/lib/libcupti_trace.so" | awk '$3 ~ /libcupti\.so/ {print $3}' | xargs -r -I{} cp -L {} "$tmp/lib/"
fi
chmod 755 "$tmp"
rm -rf "$root/.gpu"
mv "$tmp" "$root/.gpu"
if [ "$xz" = 1 ]; then
  strip "$root/.gpu/bin/"*
  mkdir -p "$root/.gpuz"
  tar -cf - -C "$root/.gpu" . | xz -9 -T0 > "$root/.gpuz/gpu.tar.xz.part"
  mv "$root/.gpuz/gpu.tar.xz.part" "$root/.gpuz/gpu.tar.xz"
  du -sh "$root/.gpuz/gpu.tar.xz"
fi
du -sh "$root/.gpu"
ls -l "$root/.gpu/bin" "$root/.gpu/lib"
