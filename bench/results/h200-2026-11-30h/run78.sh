# session 11, run 78: float32 queries on half corpora converted on the GPU for score and topK too
# (CastHostQueriesFor), host quantize 2x faster: the correctness, two-stage and int8 GPU tests, then
# topk-gpu.js (batch top-10) and two-stage-gpu.js.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
MAXSIM_TEST_SEED=$RANDOM timeout 300 $N --test --test-reporter=spec dist/test/gpu/correctness.test.js dist/test/gpu/two-stage.test.js dist/test/gpu/int8.test.js > $R/tests.log 2>&1
echo "tests rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)|✖" $R/tests.log | head -30
timeout 200 $N dist/bench/topk-gpu.js > $R/topk-gpu.txt 2>&1; echo "topk-gpu rc $?"; cat $R/topk-gpu.txt
timeout 150 $N dist/bench/two-stage-gpu.js > $R/two-stage.txt 2>&1; cat $R/two-stage.txt
cd $OUT && tar czf run78.tgz r && rm -rf r
