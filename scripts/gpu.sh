#!/usr/bin/env bash
# The GPU jobs of this repository, one device call each, run from the checkout on a GPU host.
#
#   bash scripts/gpu.sh JOB [args...]
#
#   check            the GPU tests (dist/test/gpu, one node --test run, --expose-gc for the finalizer
#                    test), after the environment: nvidia-smi, node, the addon, cuda.status() / info
#   bench [ARGS]     check, then `maxsim verify --backend cuda`, then `maxsim bench --backend cuda --json
#                    ARGS` (default: the full target grid, with the PyTorch baseline and the GPU's
#                    ceilings in the same process) and one summary line per shape
#   int8 [ARGS]      the 8-bit GPU tests and the dispatcher tests, `maxsim bench --dtype int8|fp8` on
#                    1,32,128,128,100000 and 1,1024,1024,128,10000 (each row times float16 on the same
#                    data and prints the ratio), then the other 8-bit variants of the compute-bound shape
#                    (ARGS go to every bench run, e.g. --repeats 50)
#   train            the CUDA training tests, the step timing and peak device memory at B = 128 and 256
#                    (ColPali shape, fp16, all pairs, one process per B), CSR vs atomic dD under
#                    contention, and the PyTorch autograd baseline where torch with CUDA is installed
#   chamfer [SHAPE]  the CUDA Chamfer bench (forward, every-target, backward; PyTorch cdist baseline)
#                    on the given B,N,M,d shapes (default 32,8192,8192,3 1,100000,100000,3
#                    1,1000000,1000000,3), then the Chamfer GPU tests
#   all              check, int8, train and chamfer, each in its own subfolder of $OUT
#
# Expects build/ (the addon and build/kernels: `npm run build`, or `node scripts/build-native.mjs`) and
# dist/ (`npm run build:ts`) in the checkout. Node: $NODE, else .gpu/node (unpacked from .gpu/node.gz,
# which ../shared/tools/stage-node.sh .gpu makes for hosts without Node), else node on the PATH.
# Logs and raw outputs go to $OUT (default ./gpu-out/JOB; git ignores it): env.log, *.tap, *.log,
# *.jsonl; the summaries are printed. MAXSIM_TEST_SEED fixes the tests' random seed (printed).
# Exit status: non-zero when a test or a bench run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

job=${1:-}
[ $# -gt 0 ] && shift
case "$job" in
  check | bench | int8 | train | chamfer | all) ;;
  *)
    sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

out=${OUT:-$PWD/gpu-out/$job}
mkdir -p "$out"
if [ -n "${NODE:-}" ]; then
  node=$NODE
elif [ -f .gpu/node.gz ] || [ -x .gpu/node ]; then
  [ -f .gpu/node.gz ] && gunzip -kf .gpu/node.gz
  chmod +x .gpu/node
  node=.gpu/node
else
  node=node
fi
seed=${MAXSIM_TEST_SEED:-$RANDOM}
cli=dist/src/cli/main.js

environment() {
  {
    echo "== $(date -u +%FT%TZ) $(uname -a)"
    nvidia-smi 2>&1 || echo "nvidia-smi not available"
    echo "== node $($node --version)"
    ls -la build/Release/maxsim_native.node build/kernels 2>&1
    cat build/kernels/UNAVAILABLE.txt 2>/dev/null
    echo "== cuda.status()"
    $node -e "const a=require('./build/Release/maxsim_native.node'); const s=a.cuda.status();
      console.log(JSON.stringify(s, null, 2));
      if (s.available) a.cuda.info(a.cuda.open(0)).then((i)=>console.log(JSON.stringify(i, null, 2)), (e)=>console.log('info failed:', e.message));"
  } > "$1/env.log" 2>&1
  head -40 "$1/env.log"
}

# tests DIR NAME FILES...: node --test with a spec report on stdout and a TAP file; prints the counts
tests() {
  local dir=$1 name=$2
  shift 2
  echo "== $name tests (MAXSIM_TEST_SEED=$seed)"
  MAXSIM_TEST_SEED=$seed $node --expose-gc --test --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$dir/$name-tests.tap" "$@" > "$dir/$name-tests.log" 2>&1
  local status=$?
  echo "$name tests: exit $status ($(grep -E '^# (pass|fail|skipped)' "$dir/$name-tests.tap" 2>/dev/null | tr '\n' ' '))"
  grep -E '^not ok|^ *not ok' "$dir/$name-tests.log" | head -20
  return $status
}

# summary FILE: one line per JSON row of a bench run
summary() {
  $node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
    const o = JSON.parse(l); const b = o.baseline ?? {};
    console.log([o.shape, o.dtype, o.fillRatio?.toFixed(2), o.variant, o.ms?.toFixed(3) + " ms", o.tflops?.toFixed(1) + " TFLOP/s",
      o.gbps?.toFixed(0) + " GB/s", "torch " + (o.torchMs?.toFixed(3) ?? o.torchStatus), o.speedupVsTorch?.toFixed(2) + "x",
      "extra " + (o.peakExtraBytes / 1e6).toFixed(1) + " MB", "err " + o.maxRelErr?.toExponential(1),
      b.variant ? `| ${b.dtype} ${b.variant} ${b.ms?.toFixed(3)} ms: ${o.speedupVsBaseline?.toFixed(2)}x` : ""].join("  ")); }' "$1"
}

job_check() {
  environment "$1"
  tests "$1" gpu dist/test/gpu/
}

job_bench() {
  local dir=$1 status=0
  shift
  job_check "$dir" > /dev/null 2>&1 || status=1
  echo "gpu tests: $(grep -E '^# (pass|fail)' "$dir/gpu-tests.tap" 2>/dev/null | tr '\n' ' ')"
  $node $cli verify --backend cuda > "$dir/verify.log" 2>&1 || status=1
  echo "verify: $(tail -1 "$dir/verify.log")"
  $node $cli bench --backend cuda --json "$@" > "$dir/bench.jsonl" 2> "$dir/bench.err" || status=1
  tail -3 "$dir/bench.err"
  summary "$dir/bench.jsonl"
  return $status
}

job_int8() {
  local dir=$1 status=0
  shift
  environment "$dir" > /dev/null
  tests "$dir" int8 dist/test/gpu/int8.test.js dist/test/int8-dispatch.test.js dist/test/fp8.test.js \
    dist/test/gpu/dispatch.test.js || status=1
  : > "$dir/bench-int8.jsonl"
  for dtype in int8 fp8; do
    for shape in 1,32,128,128,100000 1,1024,1024,128,10000; do
      $node $cli bench --backend cuda --dtype $dtype --shape "$shape" --no-torch --json "$@" \
        >> "$dir/bench-int8.jsonl" 2>> "$dir/bench-int8.err" || status=1
    done
  done
  summary "$dir/bench-int8.jsonl"
  # the variants the dispatcher does not pick on the compute-bound shape, and g4 on the memory-bound one
  : > "$dir/bench-int8-variants.jsonl"
  for dtype in int8 fp8; do
    for v in wgmma_w2m2n64 wgmma_n128 mma_g4; do
      $node $cli bench --backend cuda --dtype $dtype --shape 1,1024,1024,128,10000 --no-torch --json \
        --variant "maxsim_${dtype}_$v" >> "$dir/bench-int8-variants.jsonl" 2>> "$dir/bench-int8.err"
    done
  done
  $node $cli bench --backend cuda --dtype int8 --shape 1,32,128,128,100000 --no-torch --json \
    --variant maxsim_int8_mma_g4 >> "$dir/bench-int8-variants.jsonl" 2>> "$dir/bench-int8.err"
  summary "$dir/bench-int8-variants.jsonl"
  return $status
}

job_train() {
  local dir=$1 status=0
  environment "$dir" > /dev/null
  tests "$dir" train dist/test/gpu/train.test.js || status=1
  echo "== step timing (node dist/bench/train-timing.js cuda B dDPath repeats inputs)"
  : > "$dir/train-timing.jsonl"
  # device-resident inputs, then host arrays (transfers included) for reference
  for args in "128 csr 5 device" "256 csr 3 device" "128 atomic 5 device" "128 csr 3 host"; do
    # shellcheck disable=SC2086
    $node dist/bench/train-timing.js cuda $args >> "$dir/train-timing.jsonl" 2>> "$dir/train-timing.err" || status=1
  done
  $node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
    const o = JSON.parse(l); console.log(`B=${o.shape.split(",")[0]} ${o.inputs} ${o.dDPath}: forward ${o.forwardMs.toFixed(2)} ms, backward ${o.backwardMs.toFixed(2)} ms, step ${o.stepMs.toFixed(2)} ms, peak extra ${(o.peakExtraBytes / 1e6).toFixed(1)} MB`); }' \
    "$dir/train-timing.jsonl"
  echo "== CSR vs atomic under contention (node dist/bench/train-contention.js B hot)"
  : > "$dir/train-contention.jsonl"
  for args in "64 2" "64 1024" "128 2"; do
    # shellcheck disable=SC2086
    $node dist/bench/train-contention.js $args >> "$dir/train-contention.jsonl" 2>> "$dir/train-contention.err" || status=1
  done
  cat "$dir/train-contention.jsonl"
  echo "== PyTorch autograd baseline (bench/baselines/torch_train.py)"
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
    python3 bench/baselines/torch_train.py --batch 128 --batch 256 > "$dir/torch-train.jsonl" 2> "$dir/torch-train.err" || status=1
    cat "$dir/torch-train.jsonl"
  else
    echo "skipped: python3 with CUDA torch is not installed here"
  fi
  return $status
}

job_chamfer() {
  local dir=$1 status=0
  shift
  environment "$dir" > /dev/null
  local args=()
  for s in ${*:-32,8192,8192,3 1,100000,100000,3 1,1000000,1000000,3}; do args+=(--shape "$s"); done
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1
  $node $cli bench --op chamfer --backend cuda "${args[@]}" --repeats 5 --warmup 1 2>&1 | tee "$dir/bench-chamfer.log" \
    || status=1
  tests "$dir" chamfer dist/test/gpu/chamfer.test.js || status=1
  return $status
}

if [ "$job" = all ]; then
  status=0
  for j in check int8 train chamfer; do
    mkdir -p "$out/$j"
    echo "==== $j"
    "job_$j" "$out/$j" || status=1
  done
else
  "job_$job" "$out" "$@"
  status=$?
fi
echo "gpu.sh $job: exit $status (logs in $out)"
exit $status
