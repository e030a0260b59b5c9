# session 10, run 68: float16 ColPali's process-to-process spread (3.53-4.30 ms): four processes of
# --dtype f16 --repeats 100 at 1,1024,1024,128,10000 while nvidia-smi samples clocks, power, temperature
# and the throttle reasons every 20 ms; then int8 --scales document the same way, for contrast.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK > $R/smi-before.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,nounits -lms 20 > $R/smi-samples.csv 2>&1 &
SMI=$!
for i in 1 2 3 4; do
  echo "== f16 $i $(date +%T.%N)" >> $R/marks.txt
  timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --shape 1,1024,1024,128,10000 --dtype f16 --repeats 100 2>>$R/bench.err | tee -a $R/spread.jsonl
  echo "== end $(date +%T.%N)" >> $R/marks.txt
done
for i in 1 2; do
  echo "== int8doc $i $(date +%T.%N)" >> $R/marks.txt
  timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --shape 1,1024,1024,128,10000 --dtype int8 --scales document --repeats 100 2>>$R/bench.err | tee -a $R/spread.jsonl
  echo "== end $(date +%T.%N)" >> $R/marks.txt
done
kill $SMI
cd $OUT && tar czf run68.tgz r && rm -rf r
