set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
for k in int8; do for v in w2m2n128 w3m1n128 tma_w2m2n64 tma_w2m2n128 tma_w3m1n128; do
  timeout 60 $N .gpu/probe.mjs maxsim_${k}_wgmma_$v $k 16,128 > $OUT/probe-$k-$v.txt 2>&1; echo "$k $v rc=$? $(grep -c err $OUT/probe-$k-$v.txt) ok; $(grep -E 'FAIL|e\+|NaN|Inf' $OUT/probe-$k-$v.txt | head -2)"
done; done
