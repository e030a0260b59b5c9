# session 11, run 80: the lifecycle GPU suite after its bad-launch test was updated (float32 host
# queries on a float16 corpus are now taken and converted on the GPU; an int8 batch is the refused one).
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
MAXSIM_TEST_SEED=$RANDOM timeout 100 $N --expose-gc --test --test-reporter=spec dist/test/gpu/lifecycle.test.js > $R/lifecycle.log 2>&1
echo "lifecycle rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)|✖" $R/lifecycle.log | head -20
cd $OUT && tar czf run80.tgz r && rm -rf r
