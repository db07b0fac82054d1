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
  # issue 12 (trainer): plot_metrics.py, the digits convergence test, the .venv/tools venv
  python3-matplotlib python3-sklearn python3-pil python3-venv
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

# --- issue 12 (trainer): .venv/tools, Debian's python3 with its torch/numpy visible, plus the
# tensorboard package (PyPI only) whose reader the TensorBoard test uses. SETUP_SKIP_PIP=1 skips.
tools="$root/.venv/tools"
if [ "${SETUP_SKIP_PIP:-0}" != 1 ] && ! "$tools/bin/python" -c "import tensorboard" 2>/dev/null; then
  echo "setup: installing tensorboard into .venv/tools (PyPI)"
  /usr/bin/python3 -m venv --system-site-packages "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check tensorboard \
    || { echo "setup: pip install tensorboard failed (SETUP_SKIP_PIP=1 to do without)" >&2; exit 1; }
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
