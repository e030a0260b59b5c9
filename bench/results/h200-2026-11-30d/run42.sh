set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
(which cuobjdump && cuobjdump -sass -fun xexp_int8_wgmma_w2m2n128_i2f build/kernels/maxsim_int8.fatbin | grep -oE "(I2F|F2I|FADD|FMUL|FMNMX|FFMA|MOV|IMAD|IADD3)[A-Z0-9._]*" | sort | uniq -c | sort -rn | head -12; echo ---; cuobjdump -sass -fun maxsim_int8_wgmma_w2m2n128 build/kernels/maxsim_int8.fatbin | grep -oE "(I2F|F2I|FADD|FMUL|FMNMX|FFMA|MOV|IMAD|IADD3)[A-Z0-9._]*" | sort | uniq -c | sort -rn | head -12) 2>&1 | tee $OUT/sass.txt
E() { timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --repeats 30 --warmup 5 "$@" 2>>$OUT/bench.err | tee -a $OUT/i2f.jsonl | J; }
for r in 1 2; do
E --shape 1,1024,1024,128,10000 --dtype int8 --variant maxsim_int8_wgmma_w2m2n128
E --shape 1,1024,1024,128,10000 --dtype int8 --variant xexp_int8_wgmma_w2m2n128_i2f
E --shape 32,32,300,128,10000 --dtype int8 --variant maxsim_int8_wgmma_w2m2n64
E --shape 32,32,300,128,10000 --dtype int8 --variant xexp_int8_wgmma_w2m2n64_i2f
done
OUT=$OUT timeout 300 bash scripts/gpu-check.sh > $OUT/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/gpu-check.log; grep -E "^\s*✖" $OUT/gpu-check.log | head -20
