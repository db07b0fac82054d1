#!/usr/bin/env bash
# Installs what a mode needs (Debian packages as root or through sudo; the few PyPI-only things in
# git-ignored folders .whl/ and .venv/), then configures and builds it, printing the build's
# progress at least every 10 s (steps done, what compiles now, an ETA). Idempotent; quiet when
# there is nothing to do.
#   scripts/setup.sh run          what the main job runs (scripts/run.sh): the packages that build
#                                 and run it, the targets `launch` and `train_resnet`; the CUDA
#                                 backend (and its wheels) only where a GPU is visible
#   scripts/setup.sh test         (the default) everything (scripts/test.sh): the test tools and
#                                 PyPI environments too, every target, and the GPU backend wherever
#                                 the CUDA toolkit is (its [gpu] tests report SKIPPED without a GPU)
#   scripts/setup.sh tensorboard  only .venv/tools with the tensorboard package (scripts/tensorboard.sh)
# run and test build in one folder. `run` keeps the GPU setting a folder already has (after
# `test`, the trainer it runs is the tested one); `test` turns the backend on where the toolkit is,
# which changes the trainer's flags (WORKER_HAVE_GPU): with ccache, compiling back and forth
# costs cache hits, not compiles.
#   SETUP_SKIP_APT=1   do not touch system packages
#   SETUP_SKIP_PIP=1   do not make the .venv/ environments (their tests then report SKIPPED)
#   SETUP_GPU=0        test mode: build without the GPU backend even where the toolkit is
#   BUILD_DIR=DIR      build folder (default: build)
#   BUILD_TYPE=TYPE    CMake build type (default: Release)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-test}"
case "$mode" in
  run|test|tensorboard) ;;
  *) echo "setup: unknown mode '$mode': use run, test or tensorboard" >&2; exit 2 ;;
esac
build_dir="${BUILD_DIR:-$root/build}"

# A GPU is visible as the launcher decides it (launcher/devices.cpp): CUDA_VISIBLE_DEVICES when
# set (its first entry neither empty nor negative), else a /dev/nvidiaN device node.
gpu_visible() {
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    local first="${CUDA_VISIBLE_DEVICES%%,*}"
    first="${first// /}"
    [ -n "$first" ] && [ "${first#-}" = "$first" ]
    return
  fi
  compgen -G '/dev/nvidia[0-9]*' >/dev/null
}
with_gpu=0
gpu_visible && with_gpu=1

# What building and running train_resnet and launch needs (run mode) ...
run_packages=(
  build-essential cmake ninja-build pkg-config
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libeigen3-dev
  libjpeg62-turbo-dev libpng-dev  # issue 11: the image pipeline
  libcurl4-openssl-dev  # issue 21: launch's etcd client (launcher/etcd/) over libcurl
  libssl-dev     # issue 22: HMAC-SHA256 of the CPU ring's set-up (OpenSSL's libcrypto)
  libxxhash-dev  # issue 22: XXH3 checksums of the checkpoints' tensors (its header only: XXH_INLINE_ALL)
  ccache  # a folder configured again (run <-> test) recompiles from the cache
)
# ... and what the tests add (test mode): Catch2, the torch/torchvision comparisons, the fuzzer,
# network namespaces, a Slurm cluster, and the Python side of issue 12 (plot_metrics.py, the
# digits convergence test, Pillow as the image pipeline's reference, the .venv/tools venv).
test_packages=(
  git catch2
  python3 python3-numpy python3-torch python3-torchvision python3-venv python3-pip
  clang-14 libfuzzer-14-dev
  iproute2 procps
  python3-yaml  # issue 21: tests/launcher/k8s_netns.py reads the examples/k8s manifests
  slurm-wlm munge
  python3-matplotlib python3-sklearn python3-pil
  etcd-server etcd-client  # issue 21: the real etcd the etcd client's tests start
)
case "$mode" in
  run) packages=("${run_packages[@]}") ;;
  test) packages=("${run_packages[@]}" "${test_packages[@]}") ;;
  tensorboard) packages=(python3 python3-venv python3-pip python3-numpy) ;;
esac

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
# issue 12 (trainer): the tensorboard package (scripts/tensorboard.sh; its event reader serves the
# TensorBoard test); the venv sees Debian's torch and numpy.
if [ "$mode" = tensorboard ]; then
  pip_venv tools "tensorboard" --system-site-packages
  exit 0
fi

# The CUDA toolkit matters where the GPU backend is built: run mode where a GPU is visible (or the
# folder has the backend already), test mode wherever the toolkit is.
nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
configured_gpu=""  # a fresh clone has no build folder yet
if [ -f "$build_dir/CMakeCache.txt" ]; then
  configured_gpu="$(sed -n 's/^LAUNCH_ENABLE_GPU:[A-Z]*=//p' "$build_dir/CMakeCache.txt")"
fi
want_cuda=0
if [ -x "$nvcc_bin" ]; then
  case "$mode" in
    test) [ "${SETUP_GPU:-1}" != 0 ] && want_cuda=1 ;;
    run) { [ "$with_gpu" = 1 ] || [ "$configured_gpu" = ON ]; } && want_cuda=1 ;;
  esac
fi

# --- nvJPEG (issue 11): the nvidia-nvjpeg wheel's header and library, unpacked into .whl/ for
# CMake (worker/data/CMakeLists.txt); without it the GPU data loader is not built.
# SETUP_SKIP_PIP=1 skips the download.
nvjpeg_version=13.0.4.44  # CUDA 13.0, as the GPU machine's driver and toolkit
nvjpeg_dir="$root/.whl/nvidia-nvjpeg"
have_cuda=0
if [ "$want_cuda" = 1 ]; then
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
if [ "${#pip_cmd[@]}" -eq 0 ] && [ "${SETUP_SKIP_PIP:-0}" != 1 ] && [ "$want_cuda" = 1 ]; then
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
if [ "$want_cuda" = 1 ] && [ "${SETUP_SKIP_PIP:-0}" != 1 ] && [ ! -f "$cfe_dir/include/cudnn_frontend.h" ] &&
   [ "${#pip_cmd[@]}" -gt 0 ]; then
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


# --- PyPI environments of the tests (test mode)
if [ "$mode" = test ]; then
  # The Paddle drop-in test (tests/launcher/frameworks): paddle's CPU build, isolated.
  pip_venv paddle "paddlepaddle==3.3.1"
  pip_venv tools "tensorboard" --system-site-packages
fi

# --- Configure and build

# configure DIR GPU(ON|OFF) TESTING(ON|OFF|keep): configured once; again when this run fetched a
# wheel-provided library, or when the folder's GPU or testing setting is not the one asked for.
configure() {
  local dir="$1" gpu="$2" testing="$3" cache="$1/CMakeCache.txt" args=()
  local generator=()
  command -v ninja >/dev/null && [ ! -f "$dir/Makefile" ] && generator=(-G Ninja)
  cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache" 2>/dev/null; }
  [ "$(cached LAUNCH_ENABLE_GPU)" = "$gpu" ] || args+=(-DLAUNCH_ENABLE_GPU="$gpu")
  if command -v ccache >/dev/null && [ -z "$(cached CMAKE_CXX_COMPILER_LAUNCHER)" ]; then
    args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  if [ "$testing" = keep ]; then
    [ -f "$cache" ] || args+=(-DBUILD_TESTING=OFF)
  elif [ "$(cached BUILD_TESTING)" != "$testing" ]; then
    args+=(-DBUILD_TESTING="$testing")
  fi
  [ -f "$cache" ] && [ "${#args[@]}" -eq 0 ] && [ "${reconfigure:-0}" != 1 ] && return 0
  echo "setup: configuring ${dir#"$root"/} (GPU backend $gpu${args[*]:+: ${args[*]}})"
  cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "${args[@]}" \
    >"$root/.cmake-configure.log" 2>&1 || { cat "$root/.cmake-configure.log" >&2; exit 1; }
}

# What the build runs now, from the processes under ninja (ninja names an edge in its output
# only once it has finished): the sources being compiled, or what is being linked.
running_steps() {
  ps -e -o ppid=,args= 2>/dev/null | awk -v p="$1" -v root="$root/" '
    $1 == p {
      what = ""
      for (i = 2; i < NF; ++i) if ($i == "-c" && $(i + 1) ~ /\.(c|cc|cpp|cxx|cu)$/) { what = $(i + 1); break }
      if (what == "") for (i = 2; i < NF; ++i) if ($i == "-o") { what = "linking " $(i + 1); break }
      if (what == "") what = $NF
      sub(root, "", what)
      sub(/.*CMakeFiles\/[^\/]*\.dir\//, "", what)
      out = out (out == "" ? "" : ", ") what
    }
    END { print out }'
}

mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# build DIR [TARGET...]: the build in the background, a line at least every 10 s: steps done of
# the total, the time so far, an ETA at the pace so far (from 10 % of the steps on: the first
# ones, Catch2's main among them, are no measure of the rest), what compiles now; its warnings
# and errors at the end. The whole log stays in DIR/build.log.
build() {
  local dir="$1" jobs log="$1/build.log" name="${1#"$root"/}" total="" pid started next finished eta now
  shift
  jobs="$(nproc 2>/dev/null || echo 2)"
  if [ -f "$dir/build.ninja" ]; then
    total="$(ninja -C "$dir" -n "$@" 2>/dev/null | grep -c '^\[' || true)"
    [ "$total" = 0 ] && return 0  # nothing to do
    echo "setup: building ${*:-everything} in $name: $total steps on $jobs cores"
    NINJA_STATUS="[%f/%t] " ninja -C "$dir" -j "$jobs" "$@" >"$log" 2>&1 &
  else
    cmake --build "$dir" -j "$jobs" ${1:+--target "$@"} >"$log" 2>&1 &
  fi
  pid=$!
  started=$SECONDS
  next=$((started + 10))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    [ "$SECONDS" -ge "$next" ] || continue
    next=$((next + 10))
    local t=$((SECONDS - started)) line
    finished="$(grep -oE '^\[ *[0-9]+(/[0-9]+|%)\]' "$log" | tail -1 | tr -d '[] ')" || true
    if [ -n "$total" ]; then
      finished="${finished%/*}"
      finished="${finished:-0}"
      line="$finished/$total steps ($((finished * 100 / total)) %), $(mmss "$t")"
      if [ $((finished * 10)) -ge "$total" ] && [ "$finished" -gt 0 ]; then  # the pace of 10 % is worth a forecast
        eta=$((t * (total - finished) / finished))
        line+=", ETA $(mmss "$eta")"
      fi
      now="$(running_steps "$pid")"
      [ -n "$now" ] && line+="; now: $now"
    else
      line="${finished:-starting}, $(mmss "$t")"
    fi
    echo "setup: building $name: $line"
  done
  if ! wait "$pid"; then
    grep -E "error|Error|FAILED" "$log" | head -40 >&2
    echo "setup: the build failed; the whole log is $log" >&2
    exit 1
  fi
  grep -E "warning:|error:" "$log" || true
  echo "setup: built ${*:-everything} in $name in $(mmss $((SECONDS - started)))"
}

# ccache: paths relative to the tree, so that a clone elsewhere (or the folder configured again)
# hits the same entries.
export CCACHE_BASEDIR="$root"
gpu=OFF
[ "$want_cuda" = 1 ] && gpu=ON
if [ "$mode" = run ]; then
  configure "$build_dir" "$gpu" keep
  build "$build_dir" launch train_resnet
  exit 0
fi
configure "$build_dir" "$gpu" ON
build "$build_dir"
