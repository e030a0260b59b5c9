# session 11, run 76: the selection kernels rewritten warp-centric (bitonic in registers, pairwise
# merges of the warps' runs): the top-K / two-stage, correctness and corpus GPU tests, then
# two-stage-gpu.js with device selection and with MAXSIM_HOST_SELECT=1, interleaved, and phases.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
MAXSIM_TEST_SEED=$RANDOM timeout 240 $N --test --test-reporter=spec dist/test/gpu/two-stage.test.js dist/test/gpu/correctness.test.js dist/test/gpu/corpus.test.js > $R/tests.log 2>&1
echo "tests rc $?"; grep -E "^ℹ (tests|pass|fail)|✖|seed" $R/tests.log | head -30
for r in 1 2; do
  timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage-device-$r.txt 2>&1; echo "device $r"; head -4 $R/two-stage-device-$r.txt
  MAXSIM_HOST_SELECT=1 timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage-host-$r.txt 2>&1; echo "host $r"; head -4 $R/two-stage-host-$r.txt
done
MAXSIM_JOB_PHASES=1 timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage-phases.txt 2>&1
grep "twoStage phases" $R/two-stage-phases.txt | tail -3; grep "topK phases" $R/two-stage-phases.txt | tail -3
cd $OUT && tar czf run76.tgz r && rm -rf r
