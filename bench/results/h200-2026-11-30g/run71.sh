# session 10, run 71: every CPU suite (npm test's files) on the GPU host, where backend 'auto' picks CUDA
# and the fidelity report has its fp8 rows; the GPU suites ran in run70.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
MAXSIM_TEST_SEED=$RANDOM timeout 400 $N --test dist/test/*.test.js > $R/cpu-suites-on-gpu-host.log 2>&1; echo "rc $?"
grep -E "^# (tests|pass|fail|skipped)" $R/cpu-suites-on-gpu-host.log; grep -E "^not ok|^    not ok" $R/cpu-suites-on-gpu-host.log | head
cd $OUT && tar czf run71.tgz r && rm -rf r
