# Opcode counts per sm_90a kernel from `cuobjdump -sass` output: sass_hist.py FILE NAME-SUBSTRING...
import re, sys, collections
text = open(sys.argv[1]).read()
want = sys.argv[2:]
arch, fn, counts = None, None, {}
for line in text.splitlines():
    m = re.search(r'arch = (sm_\w+)', line)
    if m: arch = m.group(1); continue
    m = re.search(r'Function : (\S+)', line)
    if m: fn = m.group(1); continue
    m = re.match(r'\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)', line)
    if m and arch == 'sm_90a' and fn and any(w in fn for w in want):
        counts.setdefault(fn, collections.Counter())[m.group(2)] += 1
for fn, c in sorted(counts.items()):
    tot = sum(c.values())
    keys = [k for k in c if re.match(r'(IMNMX|VIMNMX|FMNMX|FMUL|FFMA|I2F|IADD|IMAD|VOTE|HGMMA|IGMMA|QGMMA|SEL|FSEL)', k)]
    print(fn, 'total', tot, ' '.join(f'{k}={c[k]}' for k in sorted(keys)))
