# session 10, run 66: the whole GPU suite on the document-scale build (cuda.ts changed: the flag), the
# fidelity report with the fp8 rows (per token and per document), and more interleaved rounds of
# ColPali / all pairs / 1,256,256 with --scales token / document, int8 and fp8, one process each.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
OUT=$R/check timeout 330 bash scripts/gpu-check.sh > /dev/null 2>&1
echo "gpu-check rc $?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/check/gpu-tests.log; grep -E "^\s*✖" $R/check/gpu-tests.log | head -20
timeout 240 $N dist/src/cli/main.js fidelity > $R/fidelity.txt 2>&1; echo "fidelity rc $?"; cat $R/fidelity.txt
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({sc:o.scales??"token",shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,x:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | tee -a $R/bench-scales.jsonl | J; }
for r in 1 2; do for s in token document; do
  E --shape 1,1024,1024,128,10000 --dtype int8 --scales $s
  E --shape 1,1024,1024,128,10000 --dtype fp8 --scales $s
done; done
for s in token document; do
  E --shape 32,32,300,128,10000 --dtype int8 --scales $s
  E --shape 32,32,300,128,10000 --dtype fp8 --scales $s
  E --shape 1,256,256,128,10000 --dtype int8 --scales $s
  E --shape 1,256,256,128,10000 --dtype fp8 --scales $s
done
cd $OUT && tar czf run66.tgz r && rm -rf r
