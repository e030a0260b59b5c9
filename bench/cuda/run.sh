#!/bin/bash
# On the GPU host, from the repo root:  bash bench/cuda/run.sh [quick] [shape-list]
# Builds the harness with nvcc there, dumps SASS instruction counts, runs correctness + timing.
set -o pipefail
cd "$(dirname "$0")"
OUTDIR=${OUT:-/tmp/out}; mkdir -p $OUTDIR
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $OUTDIR/gpu.txt
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fopenmp harness.cu -lcuda -o /tmp/harness || exit 1
for f in maxsim_simt maxsim_mma maxsim_wgmma; do
  cuobjdump --dump-sass out/$f.fatbin > /tmp/$f.sass 2>/dev/null
  echo "$f SASS sm_90a: HMMA=$(grep -c HMMA /tmp/$f.sass) HGMMA=$(grep -c HGMMA /tmp/$f.sass) LDSM=$(grep -c LDSM /tmp/$f.sass) LDGSTS=$(grep -c LDGSTS /tmp/$f.sass) LDL=$(grep -c LDL /tmp/$f.sass) STL=$(grep -c STL /tmp/$f.sass)"
done
timeout ${HARNESS_TIMEOUT:-300} /tmp/harness out "$@" 2>&1 | tee $OUTDIR/harness.log
cuobjdump --dump-sass -fun maxsim_wgmma_w2m2n64_f16 out/maxsim_wgmma.fatbin > $OUTDIR/w4n64.sass 2>&1
grep -E "HGMMA|WARPGROUP" $OUTDIR/w4n64.sass | head -24
if [ -n "$NCU" ]; then
  cuobjdump --dump-sass -fun maxsim_wgmma_w2m2n64_f16 out/maxsim_wgmma.fatbin > $OUTDIR/w4n64.sass 2>&1
  ONLY=w4n64 timeout 200 ncu --clock-control none -k regex:maxsim_wgmma_w4n64_f16 -c 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis /tmp/harness out quick 7 > $OUTDIR/ncu.txt 2>&1
  grep -v "^CHECK" $OUTDIR/ncu.txt | tail -120
fi
