# session 8, run 54: the 8-bit producers' walk as one lambda (cubins differ): 8-bit + two-stage suites, ColPali and all pairs rows
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --repeats 20 --warmup 3 "$@" 2>>$OUT/bench.err | tee -a $OUT/walk-refactor.jsonl | J; }
MAXSIM_TEST_SEED=$RANDOM timeout 200 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/two-stage.test.js > $OUT/gpu-tests-walk-refactor.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/gpu-tests-walk-refactor.log; grep -E "^\s*✖" $OUT/gpu-tests-walk-refactor.log | head
for k in int8 fp8; do E --shape 1,1024,1024,128,10000 --dtype $k; E --shape 32,32,300,128,10000 --dtype $k; done
