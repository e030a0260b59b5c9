// A small, fast, seeded PRNG (xoshiro128**, seeded through splitmix32) and helpers that fill typed
// arrays with it. Math.random cannot be seeded, and the demo corpus, benchmarks and `verify` must be
// reproducible from a seed.

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  private spareNormal = Number.NaN;

  constructor(seed: number) {
    // splitmix32 spreads any seed (0 included) over the 128-bit state, which must not be all zero.
    let s = seed >>> 0;
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next() | 1;
  }

  /** Uniform 32-bit unsigned integer. */
  uint32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.uint32() / 4294967296;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.float() * n);
  }

  /** Uniform integer in [min, max]. */
  intBetween(min: number, max: number): number {
    return min + this.int(max - min + 1);
  }

  /** Standard normal (Box-Muller; the second value of each pair is kept for the next call). */
  normal(): number {
    if (!Number.isNaN(this.spareNormal)) {
      const v = this.spareNormal;
      this.spareNormal = Number.NaN;
      return v;
    }
    const u = 1 - this.float(); // (0, 1]: log stays finite
    const r = Math.sqrt(-2 * Math.log(u));
    const theta = 2 * Math.PI * this.float();
    this.spareNormal = r * Math.sin(theta);
    return r * Math.cos(theta);
  }

  /** `count` distinct integers from [0, n), in random order (partial Fisher-Yates). */
  sample(n: number, count: number): Int32Array {
    const pool = new Int32Array(n);
    for (let i = 0; i < n; i++) pool[i] = i;
    for (let i = 0; i < count; i++) {
      const j = i + this.int(n - i);
      const t = pool[i];
      pool[i] = pool[j];
      pool[j] = t;
    }
    return pool.slice(0, count);
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** Scales each `dim`-long row of `data` to unit L2 norm (an all-zero row becomes a basis vector). */
export function normalizeRows(data: Float32Array, dim: number): Float32Array {
  for (let o = 0; o < data.length; o += dim) {
    let ss = 0;
    for (let k = 0; k < dim; k++) ss += data[o + k] * data[o + k];
    if (ss === 0) {
      data[o] = 1;
      continue;
    }
    const inv = 1 / Math.sqrt(ss);
    for (let k = 0; k < dim; k++) data[o + k] *= inv;
  }
  return data;
}

/**
 * `tokens` random unit vectors of dimension `dim`. Components are uniform in [-1, 1) rather than normal:
 * several times faster to draw, and timing and accuracy checks do not need directions that are uniform on
 * the sphere.
 */
export function randomUnitTokens(rng: Rng, tokens: number, dim: number): Float32Array {
  const data = new Float32Array(tokens * dim);
  for (let i = 0; i < data.length; i++) data[i] = rng.uint32() / 2147483648 - 1;
  return normalizeRows(data, dim);
}

/** Normal(0, 1) samples. */
export function normalSamples(rng: Rng, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = rng.normal();
  return out;
}
