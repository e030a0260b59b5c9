# session 10, run 70: final check on the committed build: the whole GPU suite, the CPU suites that use
# the GPU when present (fidelity with its fp8 rows, the CLI), and one burst ColPali row per 8-bit format.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
OUT=$R/check timeout 330 bash scripts/gpu-check.sh > /dev/null 2>&1
echo "gpu-check rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/check/gpu-tests.log; grep -E "^\s*✖" $R/check/gpu-tests.log | head -20
timeout 200 $N --test dist/test/fidelity.test.js dist/test/cli.test.js dist/test/two-stage.test.js > $R/cpu-suites-on-gpu-host.log 2>&1; echo "cpu suites rc $?"; grep -E "^# (pass|fail)" $R/cpu-suites-on-gpu-host.log
for d in int8 fp8; do for s in token document; do
  timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --shape 1,1024,1024,128,10000 --dtype $d --scales $s 2>>$R/bench.err | tee -a $R/bench-final.jsonl | cut -c1-200
done; done
cd $OUT && tar czf run70.tgz r && rm -rf r
