#!/usr/bin/env bash
# The GPU check's step on the GPU machine (benchmarks/gpu/README.md):
#
#   bash benchmarks/gpu/device.sh PART [PART ...]
#
# run in the repository's root there, with .gpu/ carried (benchmarks/gpu/prepare.py made it
# here). PARTs, in the order given, each within its own time limit (seconds, overridable):
#   smoke      the environment, `advisor hardware`, every CUDA-marked test      (LIMIT_SMOKE=160)
#   doctor     `advisor doctor` on its built-in model, every GPU option          (LIMIT_DOCTOR=210)
#   tune       `advisor tune` of GPT-2 small (context 512) with confirmation,
#              `advisor measure` of its pick, and the memory plans against the
#              measured peaks of its trials                                      (LIMIT_TUNE=300)
#   knobs      each GPU knob against its model's fp32 baseline, paired           (LIMIT_KNOBS=200)
#   inference  the inference knobs (int8 / int4 / fp8, 2:4, compile), paired     (LIMIT_INFERENCE=150)
#   compile    each compile mode (CUDA graphs included), paired                  (LIMIT_COMPILE=200)
#   doctor-gpt2  `advisor doctor` on GPT-2 small                                 (LIMIT_DOCTOR_GPT2=240)
#
# Results go under $OUT (the device tool's folder that comes back; ./gpu-out elsewhere): one
# PART.tar.gz of that part's JSON, log and study, and PART.txt, its log's last lines (at most
# 8 files come back: install.txt and two a part, so three parts a command). Nothing
# is fetched from the network. ADVISOR_CHECK_COMMIT names the commit in the results.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${OUT:-$REPO/gpu-out}
SITE=${ADVISOR_CHECK_SITE:-/tmp/advisor-check-site}
PY=${ADVISOR_CHECK_PYTHON:-python3}
mkdir -p "$OUT"
export ADVISOR_HOME=/tmp/advisor-check-home PYTHONUNBUFFERED=1
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PATH=$SITE/bin:$PATH

say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

install() {
  # The carried wheels, then advisor itself built from this tree (its code as it is now).
  local t0=$SECONDS
  if [ ! -f "$SITE/.wheels-installed" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$SITE" \
      .gpu/wheels/*.whl || { say "installing the carried wheels failed"; return 1; }
    touch "$SITE/.wheels-installed"
  fi
  rm -rf /tmp/advisor-check-wheel "$SITE"/advisor "$SITE"/advisor-*.dist-info
  "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-index --disable-pip-version-check \
    -w /tmp/advisor-check-wheel . || { say "building advisor's wheel failed"; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --upgrade --target "$SITE" \
    /tmp/advisor-check-wheel/advisor-*.whl || { say "installing advisor failed"; return 1; }
  say "installed in $((SECONDS - t0)) s: $("$PY" -c 'import advisor, ray, optuna, torch; print("advisor", advisor.__version__, "ray", ray.__version__, "optuna", optuna.__version__, "torch", torch.__version__)')"
}

# Runs "$@" with at most $1 seconds (SIGINT first: advisor stops gracefully); says so on stderr.
bounded() {
  local limit=$1; shift
  say "+ $* (at most ${limit} s)" >&2
  timeout --signal=INT --kill-after=20 "$limit" "$@"
  local rc=$?
  [ $rc -eq 124 ] && say "stopped at its limit of ${limit} s" >&2
  say "exit status $rc" >&2
  return 0
}

part_smoke() {
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv || true
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-", torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "")'
    "$PY" -m pip list --format=freeze 2>/dev/null
  } > "$W/environment.txt" 2>&1
  head -8 "$W/environment.txt"
  bounded 60 advisor hardware --json > "$W/hardware.json"
  advisor hardware 2>&1 | head -60
  # Every test marked cuda, from the files that hold one (the whole suite needs packages
  # this machine lacks: optuna-dashboard, pytest-textual-snapshot, psycopg).
  local files
  files=$(grep -rlE "mark\.cuda|pytestmark = .*cuda" tests --include='test_*.py' | sort)
  (cd /tmp && bounded "$(( LIMIT - 30 ))" "$PY" -m pytest -m cuda -q -p no:cacheprovider -o addopts= \
      --timeout 240 -rA --junitxml="$W/cuda-tests.xml" $(printf "$REPO/%s " $files))
}

part_doctor() {
  bounded "$(( LIMIT - 10 ))" advisor doctor --json --trial-timeout 90 > "$W/doctor_builtin.json"
}

part_doctor_gpt2() {
  bounded "$(( LIMIT - 10 ))" advisor doctor benchmarks/gpu/models/gpt2_small.py --json --trial-timeout 120 \
    > "$W/doctor_gpt2.json"
}

part_tune() {
  local db="sqlite:///$W/study.db" model=benchmarks/gpu/models/gpt2_small.py
  # sized from the H100 and H200 runs: the baseline's first probe ~36 s (the process's start,
  # the memory plan), a later one ~7-10 s, fp32 training ~90 samples/s; with --space gpu
  # (compile: a ~45 s probe) neither reached the confirmation, so three precisions here
  bounded "$(( LIMIT - 120 ))" advisor tune "$model" --space benchmarks/gpu/spaces/gpt2_check.yaml \
    --study gpt2-check --storage "$db" \
    --trials "${TUNE_TRIALS:-3}" --train-samples "${TUNE_SAMPLES:-1024}" --metric-seeds 1 \
    --pairs 2 --confirm-top 1 --confirm-target 0.05 --trial-timeout 120 --no-tui --json > "$W/tune.json"
  bounded 20 advisor export --storage "$db" --study gpt2-check --pick fastest -o "$W/pick.yaml"
  [ -f "$W/pick.yaml" ] && bounded 80 advisor measure "$model" --config "$W/pick.yaml" \
    --pairs 2 --no-metric --trial-timeout 60 --json > "$W/measure.json"
  bounded 15 "$PY" benchmarks/gpu/memory_plans.py "$W/study.db" gpt2-check -o "$W/memory_plans.json"
}

part_knobs() {
  bounded "$(( LIMIT - 20 ))" "$PY" benchmarks/gpu/knobs.py train --out "$W" --budget-s "$(( LIMIT * 2 / 3 ))"
  bounded 15 "$PY" benchmarks/gpu/memory_plans.py --knobs "$W/knobs_train.json" -o "$W/memory_plans_knobs.json"
}

part_inference() {
  bounded "$(( LIMIT - 10 ))" "$PY" benchmarks/gpu/knobs.py inference --out "$W" --budget-s "$(( LIMIT * 2 / 3 ))"
}

part_compile() {
  # a run at most 100 s: one slow autotune cannot spend the part
  bounded "$(( LIMIT - 10 ))" "$PY" benchmarks/gpu/knobs.py compile --out "$W" --budget-s "$(( LIMIT / 2 ))" --pairs 3 \
    --trial-timeout 100
}

[ $# -gt 0 ] || { echo "usage: bash benchmarks/gpu/device.sh PART [PART ...]" >&2; exit 2; }
install 2>&1 | tee "$OUT/install.txt" || true
for part in "$@"; do
  fn="part_${part//-/_}"
  declare -F "$fn" > /dev/null || { say "unknown part $part"; continue; }
  var="LIMIT_$(echo "${part//-/_}" | tr a-z A-Z)"
  case $part in
    smoke) LIMIT=${!var:-160} ;; inference) LIMIT=${!var:-150} ;; knobs) LIMIT=${!var:-200} ;;
    doctor) LIMIT=${!var:-210} ;; tune) LIMIT=${!var:-300} ;; compile) LIMIT=${!var:-200} ;;
    *) LIMIT=${!var:-240} ;;
  esac
  W=$(mktemp -d "/tmp/advisor-check-$part.XXXX")
  say "part $part, at most $LIMIT s, commit ${ADVISOR_CHECK_COMMIT:-?}"
  ( "$fn" ) > "$W/log.txt" 2>&1
  tail -c 6000 "$W/log.txt" > "$OUT/$part.txt"
  tar -czf "$OUT/$part.tar.gz" -C "$W" . && say "part $part done: $(du -h "$OUT/$part.tar.gz" | cut -f1)"
done
