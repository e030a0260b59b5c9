set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
B() { timeout 40 $N dist/src/cli/main.js bench --backend cuda --repeats 30 --warmup 5 --no-torch --json "$@" 2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | J; }
MAXSIM_TEST_SEED=$RANDOM timeout 150 $N --test --test-reporter=spec dist/test/gpu/correctness.test.js dist/test/gpu/corpus.test.js > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/tests.log; grep -E "^\s*✖" $OUT/tests.log | head
B --shape 1,128,300,128,100000
B --shape 1,128,300,128,100000 --variant maxsim_wgmma_pp_m2n64_f16
B --shape 1,1024,1024,128,1000
B --shape 32,32,300,128,10000
