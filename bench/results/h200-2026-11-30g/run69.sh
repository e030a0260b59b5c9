# session 10, run 69: the figures again with the timed warm-up (--warmup-ms 1000 default, item 37),
# nvidia-smi sampling clocks and throttle reasons every 50 ms throughout.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,nounits -lms 50 > $R/smi-samples.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({sc:o.scales??"token",shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),max:+o.msMax.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,x:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { echo "== $(date +%T.%N) $*" >> $R/marks.txt; timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | tee -a $R/bench-warm.jsonl | J; }
for r in 1 2; do for s in token document; do
  E --shape 1,1024,1024,128,10000 --dtype int8 --scales $s
  E --shape 1,1024,1024,128,10000 --dtype fp8 --scales $s
done; done
E --shape 1,32,128,128,100000 --dtype int8
E --shape 1,32,128,128,100000 --dtype int8
for s in token document; do
  E --shape 32,32,300,128,10000 --dtype int8 --scales $s
  E --shape 32,32,300,128,10000 --dtype fp8 --scales $s
  E --shape 1,256,256,128,10000 --dtype int8 --scales $s
  E --shape 1,256,256,128,10000 --dtype fp8 --scales $s
done
echo "== $(date +%T.%N) two-stage" >> $R/marks.txt
timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage.txt 2>&1; tail -5 $R/two-stage.txt
echo "== $(date +%T.%N) default bench with torch" >> $R/marks.txt
timeout 240 $N dist/src/cli/main.js bench --backend cuda --json > $R/bench-default.jsonl 2>>$R/bench.err; echo "default rc $?"
kill $SMI
cd $OUT && tar czf run69.tgz r && rm -rf r
