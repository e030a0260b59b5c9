#!/usr/bin/env bash
# The GPU check: runs the GPU tests (test/gpu) with a staged Node on a host that has none.
# Expects build/ (addon + kernels), dist/ (compiled TypeScript) and .gpu/node.gz (from
# ../shared/tools/stage-node.sh .gpu) in the checkout. Logs go to $OUT (default ./gpu-check-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"

gunzip -kf .gpu/node.gz && chmod +x .gpu/node
node=.gpu/node

{
  echo "== $(date -u +%FT%TZ) $(uname -a)"
  nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo "== node $($node --version)"
  ls -la build/Release/maxsim_native.node build/kernels 2>&1
  cat build/kernels/UNAVAILABLE.txt 2>/dev/null
  echo "== cuda.status()"
  $node -e "const a=require('./build/Release/maxsim_native.node'); console.log(JSON.stringify(a.cuda.status(), null, 2));
    const s=a.cuda.status(); if (s.available) { const h=a.cuda.open(0); a.cuda.info(h).then((i)=>console.log(JSON.stringify(i, null, 2)), (e)=>console.log('info failed:', e.message)); }"
} > "$out/env.log" 2>&1
cat "$out/env.log"

# --expose-gc lets the finalizer test run; one process per file so a lost context stays local.
MAXSIM_TEST_SEED=${MAXSIM_TEST_SEED:-$RANDOM} $node --expose-gc --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$out/gpu-tests.tap" dist/test/gpu/ 2>&1 | tee "$out/gpu-tests.log"
status=${PIPESTATUS[0]}
echo "gpu-check: node --test exited with $status (logs in $out)"
exit "$status"
