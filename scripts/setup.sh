#!/usr/bin/env bash
# Installs the missing Debian packages (as root or through sudo), then configures and builds
# into build/ (binaries in build/bin/). Idempotent; quiet when there is nothing to do.
#   SETUP_SKIP_APT=1   do not touch system packages
#   BUILD_DIR=DIR      build folder (default: build)
#   BUILD_TYPE=TYPE    CMake build type (default: Release)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"

packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 libeigen3-dev
  python3 python3-numpy python3-torch python3-torchvision
  clang-14 libfuzzer-14-dev
  iproute2 procps
  slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ] && [ "${SETUP_SKIP_APT:-0}" != 1 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- cudnn-frontend headers (issue 13): header-only C++ from the nvidia-cudnn-frontend wheel
# (Debian has no package), unpacked into .venv/cudnn-frontend/include, where CMake looks. The
# GPU backend's graph-API convolution engines need them; without them it builds with the legacy
# cuDNN API only (and says so when configuring). SETUP_SKIP_PIP=1 leaves them out.
cfe_version=1.32.0
cfe_dir="$root/.venv/cudnn-frontend"
if [ "${SETUP_SKIP_PIP:-0}" != 1 ] && [ ! -f "$cfe_dir/include/cudnn_frontend.h" ]; then
  echo "setup: fetching cudnn-frontend $cfe_version headers"
  cfe_tmp="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$cfe_version" -d "$cfe_tmp" >/dev/null 2>&1 &&
     python3 - "$cfe_tmp" <<'PYEOF'
import glob, sys, zipfile
tmp = sys.argv[1]
with zipfile.ZipFile(glob.glob(tmp + "/*.whl")[0]) as z:
    z.extractall(tmp + "/x", [n for n in z.namelist() if n.startswith("include/")])
PYEOF
  then
    mkdir -p "$cfe_dir" && rm -rf "$cfe_dir/include" && mv "$cfe_tmp/x/include" "$cfe_dir/include"
  else
    echo "setup: warning: could not fetch nvidia-cudnn-frontend $cfe_version: the GPU backend builds with the legacy cuDNN API only" >&2
  fi
  rm -rf "$cfe_tmp"
fi

generator=()
command -v ninja >/dev/null && [ ! -f "$build_dir/Makefile" ] && generator=(-G Ninja)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >"$root/.cmake-configure.log" 2>&1 \
    || { cat "$root/.cmake-configure.log" >&2; exit 1; }
fi
jobs="$(nproc 2>/dev/null || echo 2)"
if ! out="$(cmake --build "$build_dir" -j "$jobs" 2>&1)"; then
  echo "$out" >&2
  exit 1
fi
echo "$out" | grep -E "warning:|error:" || true
