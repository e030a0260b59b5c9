# session 11, run 79: final check. Float queries on int8 corpora quantized on the GPU by the job
# (ConvertHostQueriesFor -> Runtime::Quantize8). The whole GPU suite, then topk-gpu.js and
# two-stage-gpu.js.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
OUT=$R/check timeout 260 bash scripts/gpu-check.sh > $R/gpu-check.out 2>&1
echo "gpu-check rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)|✖" $R/check/gpu-tests.log | head -30
rm -f $R/check/gpu-tests.tap
timeout 100 $N dist/bench/topk-gpu.js > $R/topk-gpu.txt 2>&1; echo "topk-gpu rc $?"; cat $R/topk-gpu.txt
timeout 60 $N dist/bench/two-stage-gpu.js > $R/two-stage.txt 2>&1; cat $R/two-stage.txt
cd $OUT && tar czf run79.tgz r && rm -rf r
