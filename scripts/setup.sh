#!/usr/bin/env bash
# Installs the missing Debian packages (as root or through sudo) and the PyPI packages the tests
# need (in git-ignored virtual environments under .venv/), then configures and builds into build/
# (binaries in build/bin/), printing the build's progress every few seconds. Idempotent; quiet
# when there is nothing to do.
#   SETUP_SKIP_APT=1   do not touch system packages
#   SETUP_SKIP_PIP=1   do not make the .venv/ environments (their tests then report SKIPPED)
#   BUILD_DIR=DIR      build folder (default: build)
#   BUILD_TYPE=TYPE    CMake build type (default: Release)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"

packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 libeigen3-dev
  python3 python3-numpy python3-torch python3-torchvision python3-venv python3-pip
  clang-14 libfuzzer-14-dev
  iproute2 procps
  slurm-wlm munge
  # issue 12 (trainer): plot_metrics.py, the digits convergence test, the .venv/tools venv
  python3-matplotlib python3-sklearn python3-pil python3-venv
  libjpeg62-turbo-dev libpng-dev  # issue 11: the image pipeline (python3-pil, above, is its reference too)
  libssl-dev      # issue 22: HMAC-SHA256 of the CPU ring's set-up (OpenSSL's libcrypto)
  libxxhash-dev   # issue 22: XXH3 checksums of the checkpoints' tensors (its header only: XXH_INLINE_ALL)
  # issue 21: the etcd client (launcher/etcd/) over libcurl; the real etcd its tests start
  libcurl4-openssl-dev etcd-server etcd-client
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

# --- nvJPEG (issue 11): the nvidia-nvjpeg wheel's header and library, unpacked into .whl/ for
# CMake (worker/data/CMakeLists.txt); without it the GPU data loader is not built.
# SETUP_SKIP_PIP=1 skips the download.
nvjpeg_version=13.0.4.44  # CUDA 13.0, as the GPU machine's driver and toolkit
nvjpeg_dir="$root/.whl/nvidia-nvjpeg"
have_cuda=0
nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
if [ -x "$nvcc_bin" ]; then
  # The wheel's library is tied to the toolkit's major version; only CUDA 13's is wired in CMake.
  cuda_major="$("$nvcc_bin" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
  if [ "$cuda_major" = 13 ]; then
    have_cuda=1
  else
    echo "setup: warning: CUDA ${cuda_major:-?} found; the nvJPEG wheel is wired for CUDA 13 only: building without the GPU data loader" >&2
  fi
fi
pip_cmd=()
for py in python3 /usr/bin/python3; do
  if "$py" -m pip --version >/dev/null 2>&1; then pip_cmd=("$py" -m pip); break; fi
done
if [ "${#pip_cmd[@]}" -eq 0 ] && [ "${SETUP_SKIP_PIP:-0}" != 1 ] && [ -x "$nvcc_bin" ]; then
  echo "setup: warning: no pip (python3-pip): building without nvJPEG (GPU data loader) and cudnn-frontend (graph-API engines)" >&2
fi
if [ "$have_cuda" = 1 ] && [ ! -f "$nvjpeg_dir/nvidia/cu13/lib/libnvjpeg.so.13" ] && [ "${SETUP_SKIP_PIP:-0}" != 1 ] &&
   [ "${#pip_cmd[@]}" -gt 0 ]; then
  echo "setup: fetching nvidia-nvjpeg $nvjpeg_version (nvJPEG for the GPU data loader)"
  tmp_whl="$(mktemp -d)"
  if "${pip_cmd[@]}" download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
       -d "$tmp_whl" "nvidia-nvjpeg==$nvjpeg_version" >/dev/null 2>&1 &&
     python3 -m zipfile -e "$tmp_whl"/nvidia_nvjpeg-*.whl "$tmp_whl/x" && [ -f "$tmp_whl/x/nvidia/cu13/lib/libnvjpeg.so.13" ]; then
    rm -rf "$nvjpeg_dir"
    mkdir -p "$root/.whl"
    mv "$tmp_whl/x" "$nvjpeg_dir"
    reconfigure=1
  else
    echo "setup: could not fetch nvidia-nvjpeg; building without the GPU data loader" >&2
  fi
  rm -rf "$tmp_whl"
fi

# --- cudnn-frontend headers (issue 13): header-only C++ from the nvidia-cudnn-frontend wheel
# (Debian has no package), unpacked into .venv/cudnn-frontend/include, where CMake looks. The
# GPU backend's graph-API convolution engines need them; without them it builds with the legacy
# cuDNN API only (and says so when configuring). SETUP_SKIP_PIP=1 leaves them out.
cfe_version=1.32.0
cfe_dir="$root/.venv/cudnn-frontend"
if [ "${SETUP_SKIP_PIP:-0}" != 1 ] && [ ! -f "$cfe_dir/include/cudnn_frontend.h" ] && [ "${#pip_cmd[@]}" -gt 0 ]; then
  echo "setup: fetching cudnn-frontend $cfe_version headers"
  cfe_tmp="$(mktemp -d)"
  if "${pip_cmd[@]}" download -q --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$cfe_version" -d "$cfe_tmp" >/dev/null 2>&1 &&
     python3 - "$cfe_tmp" <<'PYEOF'
import glob, sys, zipfile
tmp = sys.argv[1]
with zipfile.ZipFile(glob.glob(tmp + "/*.whl")[0]) as z:
    z.extractall(tmp + "/x", [n for n in z.namelist() if n.startswith("include/")])
PYEOF
  then
    mkdir -p "$cfe_dir" && rm -rf "$cfe_dir/include" && mv "$cfe_tmp/x/include" "$cfe_dir/include"
    reconfigure=1
  else
    echo "setup: warning: could not fetch nvidia-cudnn-frontend $cfe_version: the GPU backend builds with the legacy cuDNN API only" >&2
  fi
  rm -rf "$cfe_tmp"
fi

# --- PyPI packages, each set in a virtual environment of its own under .venv/ (PLAN.md).
# pip_venv NAME "PACKAGES" [--system-site-packages]: made once; a stamp names what is installed.
pip_venv() {
  local name="$1" spec="$2" venv="$root/.venv/$1" stamp
  stamp="$venv/.installed-$(echo "$spec" | tr ' =' '_-')"
  [ "${SETUP_SKIP_PIP:-0}" = 1 ] || [ -f "$stamp" ] && return 0
  echo "setup: installing $spec into .venv/$name (from PyPI)"
  rm -rf "$venv"
  /usr/bin/python3 -m venv ${3:-} "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check $spec || { echo "setup: pip install $spec failed" >&2; exit 1; }
  touch "$stamp"
}
# The Paddle drop-in test (tests/launcher/frameworks): paddle's CPU build, isolated.
pip_venv paddle "paddlepaddle==3.3.1"
# issue 12 (trainer): the tensorboard package, whose event reader the TensorBoard test uses; the
# venv sees Debian's torch and numpy.
pip_venv tools "tensorboard" --system-site-packages

generator=()
command -v ninja >/dev/null && [ ! -f "$build_dir/Makefile" ] && generator=(-G Ninja)
# Configured once; again when this run fetched a wheel-provided library that an existing
# configuration recorded as missing.
if [ ! -f "$build_dir/CMakeCache.txt" ] || [ "${reconfigure:-0}" = 1 ]; then
  echo "setup: configuring $build_dir"
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >"$root/.cmake-configure.log" 2>&1 \
    || { cat "$root/.cmake-configure.log" >&2; exit 1; }
fi

# The build, its progress shown every few seconds (ninja's [done/total], make's [ NN%]), its
# warnings and errors at the end; the whole log stays in $build_dir/build.log.
jobs="$(nproc 2>/dev/null || echo 2)"
log="$build_dir/build.log"
NINJA_STATUS="[%f/%t] " cmake --build "$build_dir" -j "$jobs" >"$log" 2>&1 &
build_pid=$!
shown="" ticks=0 started=$SECONDS
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 1
  ticks=$((ticks + 1))
  [ $((ticks % 5)) = 0 ] || continue
  status="$(grep -oE '^\[ *[0-9]+(/[0-9]+|%)\]' "$log" | tail -1 | tr -d '[] ')" || true
  if [ -n "$status" ] && [ "$status" != "$shown" ]; then
    case "$status" in
      */*) echo "setup: building: $status steps ($(( ${status%/*} * 100 / ${status#*/} ))%, $((SECONDS - started)) s)" ;;
      *) echo "setup: building: $status ($((SECONDS - started)) s)" ;;
    esac
    shown="$status"
  fi
done
if ! wait "$build_pid"; then
  grep -E "error|Error|FAILED" "$log" | head -40 >&2
  echo "setup: the build failed; the whole log is $log" >&2
  exit 1
fi
grep -E "warning:|error:" "$log" || true
[ -n "$shown" ] && echo "setup: build done in $((SECONDS - started)) s"
true
