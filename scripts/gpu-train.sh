#!/usr/bin/env bash
# Training on the GPU host, one call: the CUDA training tests (dist/test/gpu/train.test.js), the step
# timing and peak extra device memory at B = 128 and 256 (ColPali shape, fp16, all pairs; one process
# per B so each peak is its own), CSR vs atomic vs 'auto' dD under contention, and the PyTorch autograd
# baseline where torch with CUDA is installed. Expects build/ (addon + kernels), dist/ (compiled
# TypeScript) and .gpu/node.gz, as scripts/gpu-check.sh does. Logs and a summary go to $OUT.
# Usage: OUT=dir bash scripts/gpu-train.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-out/train}
mkdir -p "$out"

gunzip -kf .gpu/node.gz && chmod +x .gpu/node
node=.gpu/node
status=0

{
  echo "== $(date -u +%FT%TZ) $(uname -a)"
  nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo "== node $($node --version)"
  ls -la build/Release/maxsim_native.node build/kernels 2>&1
  cat build/kernels/UNAVAILABLE.txt 2>/dev/null
} > "$out/env.log" 2>&1

seed=${MAXSIM_TEST_SEED:-$RANDOM}
echo "== training tests (seed $seed)"
MAXSIM_TEST_SEED=$seed $node --expose-gc --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$out/train-tests.tap" dist/test/gpu/train.test.js \
  > "$out/train-tests.log" 2>&1 || status=1
grep -E '^# (tests|pass|fail|skipped)' "$out/train-tests.tap" 2>/dev/null | tr '\n' ' '
echo
grep -E '^not ok|Error|assert' "$out/train-tests.log" | head -20

echo "== step timing (node dist/bench/train-timing.js cuda B dDPath repeats inputs)"
: > "$out/train-timing.jsonl"
# device-resident inputs (the issue's figures), then host arrays (transfers included) for reference
for args in "128 csr 5 device" "256 csr 3 device" "128 atomic 5 device" "128 csr 3 host"; do
  # shellcheck disable=SC2086
  $node dist/bench/train-timing.js cuda $args >> "$out/train-timing.jsonl" 2>> "$out/train-timing.err" || status=1
done
$node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
  const o = JSON.parse(l); console.log(`B=${o.shape.split(",")[0]} ${o.inputs} ${o.dDPath}: forward ${o.forwardMs.toFixed(2)} ms, backward ${o.backwardMs.toFixed(2)} ms (${o.backwardOverForward.toFixed(2)}x), step ${o.stepMs.toFixed(2)} ms (${o.stepOverForward.toFixed(2)}x forward), peak extra ${(o.peakExtraBytes / 1e6).toFixed(1)} MB`); }' \
  "$out/train-timing.jsonl"
tail -5 "$out/train-timing.err"

echo "== CSR vs atomic under contention (node dist/bench/train-contention.js B hot)"
: > "$out/train-contention.jsonl"
for args in "64 2" "64 1024" "128 2"; do
  # shellcheck disable=SC2086
  $node dist/bench/train-contention.js $args >> "$out/train-contention.jsonl" 2>> "$out/train-contention.err" || status=1
done
cat "$out/train-contention.jsonl"
tail -5 "$out/train-contention.err"

echo "== PyTorch autograd baseline (bench/baselines/torch_train.py)"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
  python3 bench/baselines/torch_train.py --batch 128 --batch 256 > "$out/torch-train.jsonl" 2> "$out/torch-train.err" || status=1
  cat "$out/torch-train.jsonl"
else
  echo "skipped: python3 with CUDA torch is not installed here" | tee "$out/torch-train.jsonl"
fi

echo "gpu-train: exit $status (logs in $out)"
exit "$status"
