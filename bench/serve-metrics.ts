// bench/serve.ts's reading of the server's /metrics (Prometheus text): histograms, gauges, the search
// latency quantile and the mean time of each pass / request phase between two scrapes.

/** Sum and count of a Prometheus histogram in /metrics text. */
export function histogram(text: string, name: string): { sum: number; count: number } {
  const sum = Number(new RegExp(`^${name}_sum (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
  const count = Number(new RegExp(`^${name}_count (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { sum, count };
}

/** Sum and count of a Prometheus histogram's series with label phase="<phase>". */
function phaseHistogram(text: string, name: string, phase: string): { sum: number; count: number } {
  const get = (suffix: string) =>
    Number(new RegExp(`^${name}_${suffix}\\{phase="${phase}"\\} (\\S+)`, 'm').exec(text)?.[1] ?? 0);
  return { sum: get('sum'), count: get('count') };
}

/** The search route's latency buckets (cumulative counts by upper bound) of a /metrics text. */
function searchBuckets(text: string): { le: number; count: number }[] {
  const out: { le: number; count: number }[] = [];
  for (const m of text.matchAll(
    /^maxsim_http_request_duration_seconds_bucket\{le="([^"]+)",route="\/v1\/search"\} (\S+)/gm,
  ))
    out.push({ le: m[1] === '+Inf' ? Number.POSITIVE_INFINITY : Number(m[1]), count: Number(m[2]) });
  return out.sort((x, y) => x.le - y.le);
}

/**
 * The server's own view of the search latency between two scrapes (onRequest to the response's end):
 * the q-quantile interpolated in its histogram's buckets (as Prometheus' histogram_quantile), ms, and
 * the share of requests over 100 ms (the p99 target). Tells the server's tail from the client's.
 */
export function serverLatency(
  before: string,
  after: string,
  q: number,
): { quantileMs: number; over100: number } {
  const b = new Map(searchBuckets(before).map((x) => [x.le, x.count]));
  const rows = searchBuckets(after).map((x) => ({ le: x.le, count: x.count - (b.get(x.le) ?? 0) }));
  const total = rows[rows.length - 1]?.count ?? 0;
  if (total === 0) return { quantileMs: Number.NaN, over100: Number.NaN };
  const within100 = rows.find((x) => x.le === 0.1)?.count ?? Number.NaN;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  let quantile = Number.NaN;
  for (const x of rows) {
    if (x.count >= rank) {
      quantile = Number.isFinite(x.le)
        ? lower + ((x.le - lower) * (rank - below)) / (x.count - below || 1)
        : lower;
      break;
    }
    lower = x.le;
    below = x.count;
  }
  return { quantileMs: quantile * 1000, over100: 1 - within100 / total };
}

export const PASS_PHASES = ['gather', 'wait', 'backend', 'merge', 'split', 'answer'] as const;
export const REQUEST_PHASES = ['parse', 'decode', 'queue', 'encode'] as const;

/** Mean ms per pass (or request) of each phase between two scrapes of /metrics. */
export function phaseMeans(before: string, after: string, name: string, phases: readonly string[]) {
  const out: Record<string, number> = {};
  for (const phase of phases) {
    const b = phaseHistogram(before, name, phase);
    const e = phaseHistogram(after, name, phase);
    out[phase] = e.count > b.count ? ((e.sum - b.sum) / (e.count - b.count)) * 1000 : Number.NaN;
  }
  return out;
}

export function gauge(text: string, name: string): number {
  return Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
}

export function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
