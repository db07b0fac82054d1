# Sourced by the scripts that run our binaries on the GPU machine (bench_ab.sh, bench_precision.sh,
# bench_startup.sh, gpu_convergence.sh): `gpu_env PROBE` sets BIN to the folder of our binaries (GPU_BIN, else .gpu/bin,
# else build/bin: the first that holds PROBE), puts the machine's CUDA, cuDNN and NCCL wheels and the
# libraries carried beside the binaries on LD_LIBRARY_PATH (../shared/DEVICE.md), and keeps NVLink
# multicast off, as it must stay on the shared machine.
gpu_env() {
  local root b
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  BIN="${GPU_BIN:-$root/.gpu/bin}"
  for b in "$BIN" "$root/build/bin"; do
    if [ -x "$b/$1" ]; then BIN="$b"; break; fi
  done
  local sp
  sp="$(python3 -c 'import site; print(site.getsitepackages()[0])')"
  export LD_LIBRARY_PATH="$sp/nvidia/cu13/lib:$sp/nvidia/cudnn/lib:$sp/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}:$BIN/../lib"
  export NCCL_NVLS_ENABLE=0
}
# check_variants SCRIPT VARIANT...: each variant a space-separated list of VAR=VALUE settings ("" for
# the defaults); exits 2 naming the first setting that is not one.
check_variants() {
  local who="$1" v kv
  shift
  for v in "$@"; do
    for kv in $v; do
      [[ "$kv" =~ ^[A-Z_][A-Z0-9_]*=.*$ ]] || { echo "$who: '$kv' in variant '$v' is not VAR=VALUE" >&2; exit 2; }
    done
  done
}
