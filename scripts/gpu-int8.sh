#!/usr/bin/env bash
# The GPU int8 / fp8 check, one device call: the 8-bit GPU tests (test/gpu/int8.test.ts, compiled),
# the CPU dispatcher tests of the 8-bit rules and of the whole table, then `maxsim bench --dtype int8`
# and `--dtype fp8` on the two target shapes (each 8-bit row times float16 on the same data in the
# same run and prints the ratio).
# Expects build/ (addon + kernels), dist/ (compiled TypeScript) and .gpu/node.gz (from
# ../shared/tools/stage-node.sh .gpu) in the checkout. Logs go to $OUT (default ./gpu-int8-out).
# Usage: OUT=dir bash scripts/gpu-int8.sh [extra args for every bench run, e.g. --repeats 50]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-int8-out}
mkdir -p "$out"

gunzip -kf .gpu/node.gz && chmod +x .gpu/node
node=.gpu/node

{
  echo "== $(date -u +%FT%TZ) $(uname -a)"
  nvidia-smi 2>&1 | head -15 || echo "nvidia-smi not available"
  echo "== node $($node --version)"
  ls -la build/Release/maxsim_native.node build/kernels 2>&1
  cat build/kernels/UNAVAILABLE.txt 2>/dev/null
} > "$out/env.log" 2>&1
cat "$out/env.log"

seed=${MAXSIM_TEST_SEED:-$RANDOM}
echo "== tests (MAXSIM_TEST_SEED=$seed)"
MAXSIM_TEST_SEED=$seed $node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$out/int8-tests.tap" \
  dist/test/gpu/int8.test.js dist/test/int8-dispatch.test.js dist/test/fp8.test.js dist/test/gpu/dispatch.test.js \
  2>&1 | tee "$out/int8-tests.log"
tests=${PIPESTATUS[0]}
echo "int8 tests: exit $tests ($(grep -E '^# (pass|fail|skipped)' "$out/int8-tests.tap" 2>/dev/null | tr '\n' ' '))"

echo "== bench"
bench=0
for dtype in int8 fp8; do
  for shape in 1,32,128,128,100000 1,1024,1024,128,10000; do
    $node dist/src/cli/main.js bench --backend cuda --dtype $dtype --shape "$shape" --no-torch --json "$@" \
      >> "$out/bench-int8.jsonl" 2>> "$out/bench-int8.err" || bench=$?
  done
done
echo "bench: exit $bench"
tail -3 "$out/bench-int8.err"
$node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
  const o = JSON.parse(l); const b = o.baseline ?? {};
  console.log([o.shape, o.dtype, o.variant, o.ms?.toFixed(3) + " ms", o.tflops?.toFixed(1) + " TFLOP/s",
    o.gbps?.toFixed(0) + " GB/s", "err " + o.maxRelErr?.toExponential(1), "|", b.dtype, b.variant,
    b.ms?.toFixed(3) + " ms", "err " + b.maxRelErr?.toExponential(1), "|", o.speedupVsBaseline?.toFixed(2) + "x"].join("  ")); }' \
  "$out/bench-int8.jsonl" 2>&1 | tee "$out/bench-int8.txt"

# the other 8-bit variants on the compute-bound shape, for tuning (the dispatcher picks mma g8 there;
# the sm_90a wgmma ones are never picked automatically until measured here)
for dtype in int8 fp8; do
  for v in wgmma_w2m2n64 wgmma_n128 mma_g4; do
    $node dist/src/cli/main.js bench --backend cuda --dtype $dtype --shape 1,1024,1024,128,10000 --no-torch \
      --json --variant "maxsim_${dtype}_$v" >> "$out/bench-int8-variants.jsonl" 2>> "$out/bench-int8.err" || true
  done
done
# and the memory-bound shape with g4 (in case g1's 12 warps per SM under-fill the memory pipe)
$node dist/src/cli/main.js bench --backend cuda --dtype int8 --shape 1,32,128,128,100000 --no-torch \
  --json --variant maxsim_int8_mma_g4 >> "$out/bench-int8-variants.jsonl" 2>> "$out/bench-int8.err" || true
$node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
  const o = JSON.parse(l); console.log([o.shape, o.variant, o.ms?.toFixed(3) + " ms", o.tflops?.toFixed(1) + " TFLOP/s",
    (o.speedupVsBaseline?.toFixed(2) ?? "-") + "x vs " + o.baseline?.variant].join("  ")); }' \
  "$out/bench-int8-variants.jsonl" 2>&1 | tee -a "$out/bench-int8.txt"

[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
