set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),torch:o.torchMs&&+o.torchMs.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
G() { echo "== $* $(date +%T)"; timeout 100 $N dist/src/cli/main.js bench --backend cuda --json "$@" 2>>$OUT/bench.err | tee -a $OUT/bench-grid-2.jsonl | J; }
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$OUT/bench.err | tee -a $OUT/bench-8bit-2.jsonl | J; }
E --shape 32,32,300,128,10000 --dtype int8
for sh in 1,32,128,128,100000 1,128,300,128,100000 1,1024,1024,128,10000 32,32,300,128,10000; do G --shape $sh; done
MAXSIM_TEST_SEED=$RANDOM timeout 150 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/two-stage.test.js > $OUT/int8-tests.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/int8-tests.log; grep -E "^\s*✖" $OUT/int8-tests.log | head
