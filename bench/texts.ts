// Seeded synthetic texts for the encoder benchmarks (bench/encode.ts, bench/serve-text.ts): words
// drawn from a small Paris vocabulary by a Lehmer generator, so every run encodes the same texts.
const WORDS = (
  'the of and to in is paris city river seine museum louvre tower eiffel arrondissement bridge garden ' +
  'street market history king revolution church art painting science music library university'
).split(' ');

/** A generator started at `seed`: uniform draws in (0, 1), and texts of `words` words from the same draws. */
export function seededText(seed: number): { rand: () => number; text: (words: number) => string } {
  let state = seed;
  const rand = () => {
    state = (state * 48271) % 2147483647;
    return state / 2147483647;
  };
  const text = (words: number) =>
    Array.from({ length: words }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' ');
  return { rand, text };
}
