set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),gbs:Math.round(o.gbps||0),tf:Math.round(o.tflops),torch:o.torchMs&&+o.torchMs.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
G() { echo "== $* $(date +%T)"; timeout 100 $N dist/src/cli/main.js bench --backend cuda --json "$@" 2>>$OUT/bench.err | tee -a $OUT/bench-grid.jsonl | J; }
for sh in 1,32,128,128,100000 1,32,300,128,100000 1,32,512,128,100000 1,128,300,128,100000 1,256,256,128,10000 1,32,128,96,100000 1,1024,1024,128,1000 1,1024,1024,128,10000 32,32,300,128,10000; do G --shape $sh; done
G --shape 1,32,512,128,100000 --ragged --fill 0.3
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$OUT/bench.err | tee -a $OUT/bench-8bit.jsonl | J; }
E --shape 1,1024,1024,128,10000 --dtype int8
E --shape 1,1024,1024,128,10000 --dtype fp8
E --shape 1,32,128,128,100000 --dtype int8
E --shape 32,32,300,128,10000 --dtype int8
E --shape 32,32,300,128,10000 --dtype fp8
E --shape 1,256,256,128,10000 --dtype int8
E --shape 1,256,256,128,10000 --dtype fp8
kill $SMI
