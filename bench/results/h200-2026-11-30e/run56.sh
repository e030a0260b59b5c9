# session 8, run 56: 8-bit consumers read the tile's scales after issuing the MMAs (not before); A/B against HEAD's fatbins
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({tag:o.tag,shape:o.shape,dtype:o.dtype,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { tag=$1; shift; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --repeats 20 --warmup 3 "$@" 2>>$OUT/bench.err | sed "s/^{/{\"tag\":\"$tag\",/" | tee -a $OUT/ab-scales-after-issue.jsonl | J; }
MAXSIM_TEST_SEED=$RANDOM timeout 100 $N --test --test-reporter=spec dist/test/gpu/int8.test.js > $OUT/gpu-tests-scales-after-issue.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail)" $OUT/gpu-tests-scales-after-issue.log; grep -E "^\s*✖" $OUT/gpu-tests-scales-after-issue.log | head -3
for r in 1 2; do for k in int8 fp8; do
  E new --shape 1,1024,1024,128,10000 --dtype $k
  MAXSIM_KERNEL_DIR=$PWD/build/kernels-old E old --shape 1,1024,1024,128,10000 --dtype $k
done; done
for k in int8 fp8; do
  E new --shape 32,32,300,128,10000 --dtype $k
  MAXSIM_KERNEL_DIR=$PWD/build/kernels-old E old --shape 32,32,300,128,10000 --dtype $k
done
