#!/usr/bin/env python3
"""Compare the machine code of two sets of CUDA cubins, kernel by kernel.

Usage:
  scripts/compare-cubins.py build SRC_DIR OUT_DIR   compile every SRC_DIR/*.cu to OUT_DIR/<name>.<arch>.cubin
                                                    with the flags of scripts/build-native.mjs
  scripts/compare-cubins.py compare BEFORE AFTER    compare the cubins of the same names in both folders

A refactor that claims identical kernels must leave every kernel's .text section (the SASS) the same
byte for byte. The per-kernel attribute sections (.nv.info.<k>: registers, barriers, parameter layout;
.nv.shared.<k> and .nv.constant0.<k>: sizes) are compared too. Debug sections (line tables) may
differ: code that moved to another header has other line numbers. The cubin is a plain ELF64 file,
so a small reader is enough (no cuobjdump needed). Exits 1 when any kernel differs or is missing.
"""
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# The per-architecture cubins of scripts/build-native.mjs's fatbin (its GENCODE, minus the PTX).
ARCHES = ['80', '90a']
FLAGS = ['-O3', '-std=c++17', '-lineinfo', '-Xptxas', '-warn-spills']
COMPARED = ('.text.', '.nv.info.', '.nv.shared.', '.nv.constant0.')


def sections(path):
    """{name: bytes} of the ELF64 little-endian file at path (NOBITS sections: their size as bytes)."""
    data = open(path, 'rb').read()
    if data[:4] != b'\x7fELF' or data[4] != 2 or data[5] != 1:
        raise ValueError(f'{path}: not an ELF64 little-endian file')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    heads = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size = struct.unpack_from('<IIQQQQ', data, shoff + i * shentsize)
        heads.append((name, typ, off, size))
    stroff = heads[shstrndx][2]
    out = {}
    for name, typ, off, size in heads:
        end = data.index(b'\0', stroff + name)
        sname = data[stroff + name:end].decode()
        # SHT_NOBITS (8): no bytes in the file; compare the size
        out[sname] = str(size).encode() if typ == 8 else data[off:off + size]
    return out


def build(src, out):
    os.makedirs(out, exist_ok=True)
    jobs = []
    for f in sorted(os.listdir(src)):
        if not f.endswith('.cu'):
            continue
        for arch in ARCHES:
            dst = os.path.join(out, f'{f[:-3]}.sm_{arch}.cubin')
            jobs.append(['nvcc', '-cubin', f'-gencode=arch=compute_{arch},code=sm_{arch}', *FLAGS, '-I', src,
                         os.path.join(src, f), '-o', dst])
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for cmd, r in zip(jobs, pool.map(lambda c: subprocess.run(c, capture_output=True, text=True), jobs)):
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                sys.exit(f'nvcc failed: {" ".join(cmd)}')
    print(f'built {len(jobs)} cubins into {out}')


def compare(before, after):
    names = sorted(set(os.listdir(before)) | set(os.listdir(after)))
    bad = 0
    same = 0
    for n in names:
        if not n.endswith('.cubin'):
            continue
        pa, pb = os.path.join(before, n), os.path.join(after, n)
        if not (os.path.exists(pa) and os.path.exists(pb)):
            print(f'MISSING  {n}: only in {"before" if os.path.exists(pa) else "after"}')
            bad += 1
            continue
        a, b = sections(pa), sections(pb)
        ka = {k[len('.text.'):] for k in a if k.startswith('.text.')}
        kb = {k[len('.text.'):] for k in b if k.startswith('.text.')}
        for k in sorted(ka ^ kb):
            print(f'MISSING  {n} {k}: only {"before" if k in ka else "after"}')
            bad += 1
        for k in sorted(ka & kb):
            diffs = [p for p in COMPARED if a.get(p + k) != b.get(p + k)]
            if diffs:
                print(f'DIFFERS  {n} {k}: {", ".join(p + k for p in diffs)}')
                bad += 1
            else:
                print(f'same     {n} {k} ({len(a[".text." + k])} bytes of SASS)')
                same += 1
    print(f'{same} kernels identical, {bad} differ or missing')
    return 1 if bad else 0


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'build':
        build(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == 'compare':
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
