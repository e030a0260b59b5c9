# session 10, run 74: the 8-bit GPU suite on the final build (quantizer entry macro, single-pass host quantizer)
# (sm_90a cubins byte-identical to run73's).
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
MAXSIM_TEST_SEED=$RANDOM timeout 300 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/corpus.test.js > $R/gpu-8bit-tests.log 2>&1
echo "tests rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)|✖" $R/gpu-8bit-tests.log | head -20; grep -n "200,000" $R/gpu-8bit-tests.log
cd $OUT && tar czf run74.tgz r && rm -rf r
