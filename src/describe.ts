// How a received value reads in an error message: its type, and its size for arrays.

/** `Float32Array(12)`, `Array(3)`, `null`, `7`, `"text"`, `object`. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (ArrayBuffer.isView(value)) {
    const v = value as ArrayBufferView & { length?: number };
    return `${value.constructor.name}(${v.length ?? v.byteLength})`;
  }
  if (Array.isArray(value)) return `Array(${value.length})`;
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  return typeof value;
}
