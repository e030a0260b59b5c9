# session 9, run 61: the fold's bit-pattern max and redo as shared helpers (fold_full_bits, redo_inexact_rows in
# maxsim_common.cuh; PTX reordered, cubins differ): every GPU suite, ColPali fp8/int8, fp16 1,128,300 and all pairs
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
OUT=$R timeout 300 bash scripts/gpu-check.sh > $R/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-check.log; grep -E "^\s*✖" $R/gpu-check.log | head -20
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | tee -a $R/bench-helpers.jsonl | J; }
for r in 1 2; do E --shape 1,1024,1024,128,10000 --dtype fp8; E --shape 1,128,300,128,100000 --dtype float16; done
E --shape 1,1024,1024,128,10000 --dtype int8
E --shape 32,32,300,128,10000 --dtype fp8
cd $OUT && tar czf run61.tgz r && rm -rf r
