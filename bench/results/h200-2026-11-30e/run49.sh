set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
for d in 128 64 32; do for v in tma_w2m2n128; do
  timeout 60 $N .gpu/probe.mjs maxsim_int8_wgmma_$v int8 $d > $OUT/probe-$v-$d.txt 2>&1; echo "$v d=$d rc=$? $(grep -c err $OUT/probe-$v-$d.txt) ok; $(grep -E 'FAIL|e\+|NaN|Inf' $OUT/probe-$v-$d.txt | head -2)"
done; done
timeout 120 compute-sanitizer --tool memcheck $N .gpu/probe.mjs maxsim_int8_wgmma_tma_w2m2n128 int8 16 > $OUT/sanitizer.txt 2>&1; echo "sanitizer rc=$?"; grep -v "^=========     Host Frame" $OUT/sanitizer.txt | head -40
