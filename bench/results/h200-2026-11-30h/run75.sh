# session 11, run 75: device top-K selection (maxsim_select.cu, device_select.cc): the two-stage and
# top-K GPU tests, then the whole GPU suite, then two-stage-gpu.js with device selection and with
# MAXSIM_HOST_SELECT=1 (the host path), interleaved, and one run with MAXSIM_JOB_PHASES=1.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
MAXSIM_TEST_SEED=$RANDOM timeout 200 $N --test --test-reporter=spec dist/test/gpu/two-stage.test.js > $R/two-stage-tests.log 2>&1
echo "two-stage tests rc $?"; grep -E "^ℹ (tests|pass|fail)|✖|seed" $R/two-stage-tests.log | head -30
for r in 1 2; do
  timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage-device-$r.txt 2>&1; echo "device $r"; cat $R/two-stage-device-$r.txt
  MAXSIM_HOST_SELECT=1 timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage-host-$r.txt 2>&1; echo "host $r"; cat $R/two-stage-host-$r.txt
done
MAXSIM_JOB_PHASES=1 timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage-phases.txt 2>&1
grep -c phases $R/two-stage-phases.txt; grep "twoStage phases" $R/two-stage-phases.txt | tail -3; grep "topK phases" $R/two-stage-phases.txt | tail -3
OUT=$R/check timeout 300 bash scripts/gpu-check.sh > $R/gpu-check.out 2>&1
echo "gpu-check rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)|✖" $R/check/gpu-tests.log | head -30
cd $OUT && tar czf run75.tgz r && rm -rf r
