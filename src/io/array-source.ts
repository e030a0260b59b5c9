// Arrays read piece by piece from .npy / .safetensors files, for inputs larger than memory (the
// corpus builder streams documents through these). Only the header is parsed up front.

import * as fs from 'node:fs';
import { FormatError, InvalidArgumentError } from '../errors.js';
import { type ArrayData, type ArrayDType, formatShape, itemSize, shapeProduct, viewAs } from './array.js';
import { resolveArraySpec } from './load.js';
import { NPY_MAX_HEADER_BYTES, parseNpyHeader } from './npy.js';
import { parseSafetensorsLayout, SAFETENSORS_MAX_HEADER_BYTES } from './safetensors.js';

export interface ArraySource {
  readonly path: string;
  readonly dtype: ArrayDType;
  readonly shape: readonly number[];
  /** Reads elements [start, start + count) (C order) into a fresh array. */
  read(start: number, count: number): ArrayData;
}

function readAt(fd: number, path: string, length: number, position: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const n = fs.readSync(fd, bytes, done, length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  if (done < length)
    throw new FormatError(path, `truncated: ${length} bytes at offset ${position} were expected`);
  return bytes;
}

/**
 * Opens `path.npy` or `path.safetensors[:tensorName]` for piecewise reading (the same spec as
 * loadArray). The file stays open until `close()`.
 */
export function openArraySource(spec: string, argument = 'spec'): ArraySource & { close(): void } {
  const { path, tensor } = resolveArraySpec(spec, argument);
  const fd = fs.openSync(path, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const head = readAt(fd, path, Math.min(size, 8), 0);
    let dtype: ArrayDType;
    let shape: number[];
    let dataStart: number;
    if (head[0] === 0x93 && head[1] === 0x4e) {
      if (tensor !== undefined)
        throw new InvalidArgumentError(argument, `no ':name' suffix (${path} is a .npy file)`, spec);
      const prefix = readAt(fd, path, Math.min(size, NPY_MAX_HEADER_BYTES + 12), 0);
      ({ dtype, shape, dataStart } = parseNpyHeader(prefix, path));
    } else {
      if (head.length < 8) throw new FormatError(path, 'too short for a .npy or safetensors file');
      const n = new DataView(head.buffer).getBigUint64(0, true);
      if (n > BigInt(SAFETENSORS_MAX_HEADER_BYTES))
        throw new FormatError(path, 'not a .npy or safetensors file');
      const layout = parseSafetensorsLayout(readAt(fd, path, 8 + Number(n), 0), path, size);
      const names = layout.entries.map((e) => e.name);
      const entry =
        tensor === undefined
          ? layout.entries.length === 1
            ? layout.entries[0]
            : undefined
          : layout.entries.find((e) => e.name === tensor);
      if (!entry)
        throw new InvalidArgumentError(
          argument,
          tensor === undefined
            ? `a tensor name (${path}:NAME), one of ${names.join(', ')}`
            : `a tensor of ${path}, one of ${names.join(', ')}`,
          JSON.stringify(spec),
        );
      dtype = entry.dtype;
      shape = entry.shape;
      dataStart = layout.bufferStart + entry.begin;
    }
    const count = shapeProduct(shape) ?? Number.POSITIVE_INFINITY;
    const size1 = itemSize(dtype);
    if (dataStart + count * size1 > size)
      throw new FormatError(
        path,
        `shape ${formatShape(shape)} of ${dtype} needs ${count * size1} data bytes but the file is shorter (truncated?)`,
      );
    return {
      path,
      dtype,
      shape,
      read(start: number, n: number): ArrayData {
        if (
          !(
            Number.isSafeInteger(start) &&
            Number.isSafeInteger(n) &&
            start >= 0 &&
            n >= 0 &&
            start + n <= count
          )
        )
          throw new InvalidArgumentError(
            'range',
            `elements within [0, ${count})`,
            `[${start}, ${start + n})`,
          );
        const bytes = readAt(fd, path, n * size1, dataStart + start * size1);
        return viewAs(path, dtype, bytes, 0, n) as ArrayData;
      },
      close() {
        fs.closeSync(fd);
      },
    };
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
}
