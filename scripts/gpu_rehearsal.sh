#!/usr/bin/env bash
# A rehearsal of the lent GPU machines' software on this CPU, before a lease: a Python 3.12
# venv OUTSIDE the repository with the image's packages (benchmarks/gpu_image.txt: torch 2.11,
# transformers 5.17, no Ray), the carried wheels (.whl) installed the way `make gpu-check`
# installs them, then what the lease runs in its dry CPU modes and the engine tests.
#
#   make gpu-rehearsal                      (or: bash scripts/gpu_rehearsal.sh)
#   REHEARSAL_DIR=/somewhere PY312=/path/to/python3.12 REHEARSAL_COMPILE=aot_eager,inductor make gpu-rehearsal
#
# Needs a package registry (about 2 GB the first time: torch's CUDA build and its nvidia-*
# wheels; they import and run on a CPU) and a python3.12. Not part of `make test`. Prints one
# line per step and exits 1 when any step failed; logs and outputs stay in $REHEARSAL_DIR.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${REHEARSAL_DIR:-/tmp/ctgscore-rehearsal}
VENV=$DIR/venv
SITE=$DIR/site  # GPU_SITE: where `make gpu-check` puts the carried wheels
LOGS=$DIR/logs
is_312() { "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; }
if [ -z "${PY312:-}" ]; then  # the first Python 3.12 that runs (a pyenv shim may not)
  for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python /usr/bin/python3.12 /usr/local/bin/python3.12; do
    if is_312 "$candidate"; then PY312=$candidate; break; fi
  done
fi
COMPILE=${REHEARSAL_COMPILE:-aot_eager}  # torch.compile backends for scripts/compile_backends.py; inductor: minutes
# the engine, benchmark and GPU-path tests, one process each file (the CUDA ones skip here)
TESTS="test_fused_activations test_packed_attention test_packed_decoder test_compile_counts test_layer_compile test_output_head
test_engine_cross_batch test_engine_device test_scoring_engine test_prompted_lm test_host_syncs test_gpu_wheels
test_gpu_ab test_gpu_sweep test_bench_gpu test_gpu_peaks test_gpu_profile test_gpu_check test_gpu_smoke"
# tests that need what the image lacks (Ray): left out, as on the GPU machine
DESELECT="--deselect tests/test_prompted_lm.py::test_job_scores_a_mixed_dump_with_gptscore"

mkdir -p "$LOGS"
failed=0
step() {  # step NAME EXPECTED_RC COMMAND...: runs it with its output in $LOGS/NAME.log
  local name=$1 want=$2 start rc
  shift 2
  start=$(date +%s)
  "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  if [ "$rc" = "$want" ]; then status=ok; else status="FAILED (exit $rc, wanted $want)"; failed=1; fi
  printf '%-28s %-28s %4ss  %s\n' "$name" "$status" "$(($(date +%s) - start))" "$(tail -n 1 "$LOGS/$name.log" | cut -c1-100)"
}

if [ -z "${PY312:-}" ] || ! is_312 "$PY312"; then
  echo "gpu-rehearsal: no Python 3.12 found; set PY312=/path/to/python3.12" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  step venv 0 "$PY312" -m venv "$VENV"
fi
step image-packages 0 "$VENV/bin/python" -m pip install --progress-bar off -r "$REPO/benchmarks/gpu_image.txt"
# typer pulls pydantic in; the image has none (ray_jobs' config would import where it cannot)
"$VENV/bin/python" -m pip uninstall -y -q pydantic pydantic-core >/dev/null 2>&1
if [ ! -d "$REPO/.whl" ]; then  # what `make gpu-wheels` downloads, without the project's own venv
  step gpu-wheels 0 "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$REPO/.whl" -r "$REPO/benchmarks/gpu_wheels.txt"
fi
"$VENV/bin/python" -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers (image)", transformers.__version__)'

cd "$REPO" || exit 2
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
unset PYTHONPATH
make_gpu() { make -s "$@" PY="$VENV/bin/python" GPU_SITE="$SITE"; }
rm -rf "$DIR/gpu-check" "$DIR/gpu-sweep" "$DIR/no-wheels"
step gpu-check 0 make_gpu gpu-check OUT="$DIR/gpu-check" GPU_CHECK_FLAGS="--device cpu --tiny"
step gpu-sweep 0 make_gpu gpu-sweep SWEEP_OUT="$DIR/gpu-sweep" GPU_SWEEP_FLAGS="--device cpu --tiny"
# without the carried wheels the image's transformers is refused at once (exit 2), never scored
step gpu-check-no-wheels 2 make -s gpu-check PY="$VENV/bin/python" OUT="$DIR/no-wheels" WHEELS="$DIR/none" \
  GPU_CHECK_FLAGS="--device cpu --tiny"
export PYTHONPATH=$REPO:$SITE  # as GPU_ENV sets it (the wheels were installed by the gpu-check step)
for backend in ${COMPILE//,/ }; do
  step "compile-$backend" 0 "$VENV/bin/python" scripts/compile_backends.py "$backend"
done
for name in $TESTS; do
  # shellcheck disable=SC2086
  step "$name" 0 "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 0 -rfEs $DESELECT "tests/$name.py"
done
echo "gpu-rehearsal: logs in $LOGS; gpu-check summary: $DIR/gpu-check/summary.md"
exit $failed
