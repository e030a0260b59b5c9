#!/usr/bin/env bash
# One device call: the GPU tests (scripts/gpu-check.sh), `maxsim verify` on CUDA, and the CUDA
# benchmark with the PyTorch baseline and the GPU's ceilings, all in the same run. Logs under $OUT.
# Usage: OUT=dir scripts/gpu-bench.sh [bench args...]   (default: the full target grid)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export OUT=$out
bash scripts/gpu-check.sh > /dev/null 2>&1
echo "gpu tests: exit $? ($(grep -E '^# (pass|fail)' "$out/gpu-tests.tap" 2>/dev/null | tr '\n' ' '))"
node=.gpu/node
$node dist/src/cli/main.js verify --backend cuda > "$out/verify.log" 2>&1
echo "verify: exit $? ($(tail -1 "$out/verify.log"))"
$node dist/src/cli/main.js bench --backend cuda --json "$@" > "$out/bench.jsonl" 2> "$out/bench.err"
echo "bench: exit $?"
tail -3 "$out/bench.err"
$node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
  const o = JSON.parse(l); console.log([o.shape, o.fillRatio?.toFixed(2), o.variant, o.ms?.toFixed(3), o.tflops?.toFixed(1),
  o.gbps?.toFixed(0), o.torchMs?.toFixed(3) ?? o.torchStatus, o.speedupVsTorch?.toFixed(2), (o.peakExtraBytes / 1e6).toFixed(1),
  o.maxRelErr?.toExponential(1)].join("  ")); }' "$out/bench.jsonl"
