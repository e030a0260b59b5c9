# session 11, run 77: the whole GPU suite on the warp-centric selection, then two-stage-gpu.js twice
# (device and host selection in one process, MAXSIM_HOST_SELECT read per call) and topk-gpu.js (batch
# top-10 of 1,000 queries, device against host selection).
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
for r in 1 2; do timeout 150 $N dist/bench/two-stage-gpu.js > $R/two-stage-$r.txt 2>&1; echo "two-stage $r"; cat $R/two-stage-$r.txt; done
timeout 200 $N dist/bench/topk-gpu.js > $R/topk-gpu.txt 2>&1; echo "topk-gpu rc $?"; cat $R/topk-gpu.txt
OUT=$R/check timeout 300 bash scripts/gpu-check.sh > $R/gpu-check.out 2>&1
echo "gpu-check rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)|✖" $R/check/gpu-tests.log | head -30
cd $OUT && tar czf run77.tgz r && rm -rf r
