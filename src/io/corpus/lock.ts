// The single-writer lock of a corpus directory.
//
// The lock is the file LOCK holding its owner's record (pid, host, boot id, process start time and a
// random token). It is created atomically: the record is written to a temporary file of its own and
// hard-linked to LOCK, which fails when LOCK exists, so LOCK is never seen empty or half-written.
// A lock is stale only when its owner is provably gone: same host, and either another boot or a pid
// that is dead (or reused by a process that started later; for a record without a start time, after
// the lock was written). A lock whose owner cannot be proven gone or running (a live pid without a
// start time, a record this version cannot read, another host) is never taken over: the error names
// it and `maxsim corpus unlock` (CorpusLock.unlock) removes it on request. Breaking a stale lock renames it aside
// under a unique name and checks that the file moved is the one judged stale (a live lock moved by
// mistake is put back), so two contenders cannot both take it. Release removes LOCK only when its
// token is ours.

import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MaxsimError } from '../../errors.js';

export const LOCK_FILE = 'LOCK';
/** Lock temporaries: `LOCK.<token>.tmp` (being created) and `LOCK.<token>.stale` (being broken). */
export const LOCK_TEMP_NAME = /^LOCK\.[0-9a-f]{32}\.(tmp|stale)$/;

/** Another writer holds the corpus. */
export class CorpusLockedError extends MaxsimError {
  override name = 'CorpusLockedError';
  constructor(
    readonly dir: string,
    readonly pid: number | undefined,
    readonly hostname: string | undefined,
    detail: string,
  ) {
    super(
      `${dir}: corpus is locked by ${pid !== undefined ? `pid ${pid}` : 'an unknown writer'}${
        hostname && hostname !== os.hostname() ? ` on host ${hostname}` : ''
      } (${detail})`,
    );
  }
}

interface LockOwner {
  pid: number;
  hostname?: string;
  bootId?: string;
  startTime?: string;
  token?: string;
}

let cachedBootId: string | null | undefined;
function bootId(): string | undefined {
  if (cachedBootId === undefined) {
    try {
      cachedBootId = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
    } catch {
      cachedBootId = null;
    }
  }
  return cachedBootId ?? undefined;
}

/** The start time of a process (clock ticks since boot, field 22 of /proc/PID/stat), where Linux says. */
function processStart(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) may hold spaces and parentheses: count fields after the last ')'
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19];
  } catch {
    return undefined;
  }
}

/** When a process started, in ms since the epoch: boot time (/proc/stat) plus its start ticks. */
function processStartMs(start: string | undefined): number | undefined {
  if (start === undefined) return undefined;
  try {
    const btime = /^btime (\d+)$/m.exec(fs.readFileSync('/proc/stat', 'utf8'));
    // /proc reports times in USER_HZ, 100 on every Linux architecture Node runs on
    return btime ? Number(btime[1]) * 1000 + (Number(start) / 100) * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** Slack between a process's computed start time and a file's mtime (btime is whole seconds). */
const START_SLACK_MS = 2000;

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Parses LOCK: a JSON owner record, or (written by older versions) a bare pid. */
function parseOwner(text: string): LockOwner | undefined {
  const bare = text.trim();
  if (/^[1-9]\d{0,9}$/.test(bare)) return { pid: Number(bare) };
  try {
    const o = JSON.parse(text) as Record<string, unknown>;
    if (o === null || typeof o !== 'object' || !Number.isSafeInteger(o.pid) || (o.pid as number) < 1)
      return undefined;
    const str = (x: unknown) => (typeof x === 'string' ? x : undefined);
    return {
      pid: o.pid as number,
      hostname: str(o.hostname),
      bootId: str(o.bootId),
      startTime: str(o.startTime),
      token: str(o.token),
    };
  } catch {
    return undefined;
  }
}

/**
 * What can be proven of a lock's owner: 'gone' (same host, and another boot, a dead pid, or a pid
 * now held by a process that started after the owner, or after the lock was written when the record
 * has no start time), 'running' (same host and boot, the pid alive with the recorded start time),
 * 'elsewhere' (another host: nothing can be checked from here) or 'unknown' (a live pid of a record
 * without a start time: older versions wrote a bare pid).
 */
function ownerState(
  o: LockOwner,
  writtenMs: number | undefined,
): 'gone' | 'running' | 'elsewhere' | 'unknown' {
  if (o.hostname !== undefined && o.hostname !== os.hostname()) return 'elsewhere';
  const boot = bootId();
  if (o.bootId !== undefined && boot !== undefined && o.bootId !== boot) return 'gone'; // rebooted since
  if (o.pid !== process.pid && !pidAlive(o.pid)) return 'gone';
  const start = processStart(o.pid);
  if (o.startTime !== undefined) {
    if (start === undefined) return 'unknown';
    // the pid lives, but as a process started after the owner: the owner died and its pid was reused
    return start === o.startTime ? 'running' : 'gone';
  }
  // no start time recorded: a process that started after the lock was written did not write it
  const startedMs = processStartMs(start);
  if (writtenMs !== undefined && startedMs !== undefined && startedMs > writtenMs + START_SLACK_MS)
    return 'gone';
  return 'unknown';
}

/** The owner of a lock, for error messages: its pid, its host (when not this one) and start time. */
function describeOwner(o: LockOwner): string {
  const here = o.hostname === undefined || o.hostname === os.hostname();
  const started = here ? processStartMs(o.startTime) : undefined;
  return `pid ${o.pid}${here ? '' : ` on host ${o.hostname}`}${
    started !== undefined ? `, started ${new Date(started).toISOString()}` : ''
  }`;
}

function mtimeOf(file: string): number | undefined {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

// A LOCK's content for an error message: JSON-quoted, cut short.
function describeRecord(text: string): string {
  return text === ''
    ? 'nothing (empty)'
    : JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}...` : text);
}

function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export interface LockOptions {
  /** Milliseconds to wait for a live writer to finish before failing (default 0: fail at once). */
  waitMs?: number;
}

/** A held lock: release() frees it once; check() throws if it is no longer ours. */
export class CorpusLock {
  private released = false;
  private constructor(
    readonly dir: string,
    readonly token: string,
    private readonly record: string,
  ) {}

  private get file(): string {
    return path.join(this.dir, LOCK_FILE);
  }

  static acquire(dir: string, options: LockOptions = {}): CorpusLock {
    const waitMs = options.waitMs ?? 0;
    if (!(Number.isFinite(waitMs) && waitMs >= 0))
      throw new MaxsimError(
        `Expected a non-negative number of milliseconds for waitMs but received ${waitMs}`,
      );
    const token = randomBytes(16).toString('hex');
    const record = JSON.stringify({
      pid: process.pid,
      hostname: os.hostname(),
      bootId: bootId(),
      startTime: processStart(process.pid),
      token,
    });
    const file = path.join(dir, LOCK_FILE);
    const tmp = path.join(dir, `${LOCK_FILE}.${token}.tmp`);
    const deadline = Date.now() + waitMs;
    let pause = 2;
    try {
      fs.writeFileSync(tmp, record, { flag: 'wx' });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new MaxsimError(
        `${dir}: cannot create the writer's lock (${code ?? (e as Error).message}${code === 'EACCES' || code === 'EROFS' ? ': the corpus directory is not writable' : ''})`,
      );
    }
    try {
      for (;;) {
        if (CorpusLock.tryCreate(tmp, file, record)) return new CorpusLock(dir, token, record);
        const text = readText(file);
        if (text === undefined) continue; // released in between: try again at once
        const owner = parseOwner(text);
        const state = owner ? ownerState(owner, mtimeOf(file)) : 'unknown';
        if (state === 'gone') {
          CorpusLock.breakStale(dir, file, text, token);
          continue;
        }
        if (Date.now() >= deadline) {
          const clear = (force: string) =>
            `if no maxsim writer is running, \`maxsim corpus unlock ${dir}${force}\` removes ${file}`;
          if (!owner)
            throw new CorpusLockedError(
              dir,
              undefined,
              undefined,
              `${file} holds ${describeRecord(text)}, not a lock record this version reads; ${clear('')}`,
            );
          const held = waitMs > 0 ? `still held after waiting ${waitMs} ms` : undefined;
          throw new CorpusLockedError(
            dir,
            owner.pid,
            owner.hostname,
            owner.pid === process.pid && state === 'running'
              ? 'another writer of this process holds it; commit or abort that writer first'
              : state === 'running'
                ? (held ?? 'another writer is appending; retry when it finishes')
                : `${held ? `${held}; ` : ''}${file} names ${describeOwner(owner)}, which ${
                    state === 'elsewhere'
                      ? 'cannot be checked from this host'
                      : 'is running but may not be a maxsim writer (the record has no start time to tell)'
                  }; ${clear(state === 'elsewhere' ? ' --force' : '')}`,
          );
        }
        sleep(Math.min(pause, Math.max(1, deadline - Date.now())) * (0.5 + Math.random()));
        pause = Math.min(pause * 2, 50);
      }
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }

  // link() publishes the complete record or fails with EEXIST. File systems without hard links get
  // an exclusive create with the record written in one call (a reader may then briefly see it short;
  // an unreadable record is never judged stale, so the worst case is a spurious "locked").
  private static tryCreate(tmp: string, file: string, record: string): boolean {
    try {
      fs.linkSync(tmp, file);
      return true;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') return false;
      if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'ENOSYS' && code !== 'EOPNOTSUPP') throw e;
    }
    try {
      fs.writeFileSync(file, record, { flag: 'wx' });
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
  }

  // Whether LOCK, holding staleText, was removed (false: gone meanwhile, or replaced and put back).
  private static breakStale(dir: string, file: string, staleText: string, token: string): boolean {
    const aside = path.join(dir, `${LOCK_FILE}.${token}.stale`);
    try {
      fs.renameSync(file, aside);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false; // another contender broke it
      throw e;
    }
    try {
      if (readText(aside) === staleText) return true;
      // Between our read and the rename another contender replaced the stale lock with its live
      // one: put that back (it fails only if a third one took LOCK meanwhile; its owner's check()
      // before publishing then refuses).
      try {
        fs.linkSync(aside, file);
      } catch {
        // see above
      }
      return false;
    } finally {
      fs.rmSync(aside, { force: true });
    }
  }

  /**
   * Removes the LOCK of `dir` unless its owner is provably running (`maxsim corpus unlock`): a stale
   * one, an unreadable one, or one naming a live pid that the record cannot tie to a writer (no
   * start time). A lock held by a running writer on this host, or one of another host, is refused
   * with CorpusLockedError unless `force`; that writer then publishes nothing (its commit re-checks
   * the lock). Returns whether a lock was removed and what it held.
   */
  static unlock(dir: string, options: { force?: boolean } = {}): { removed: boolean; record?: string } {
    let st: fs.Stats;
    try {
      st = fs.statSync(dir);
    } catch {
      throw new MaxsimError(`${dir}: no such corpus directory`);
    }
    if (!st.isDirectory()) throw new MaxsimError(`${dir}: not a corpus directory (a corpus is a directory)`);
    const file = path.join(dir, LOCK_FILE);
    const text = readText(file);
    if (text === undefined) return { removed: false };
    const owner = parseOwner(text);
    const state = owner ? ownerState(owner, mtimeOf(file)) : 'unknown';
    if (owner && (state === 'running' || state === 'elsewhere') && options.force !== true)
      throw new CorpusLockedError(
        dir,
        owner.pid,
        owner.hostname,
        `${file} ${
          state === 'running'
            ? `is held by a running writer (${describeOwner(owner)})`
            : `names ${describeOwner(owner)}, which cannot be checked from this host`
        }; not removed: \`maxsim corpus unlock ${dir} --force\` removes it anyway, and that writer then publishes nothing`,
      );
    const removed = CorpusLock.breakStale(dir, file, text, randomBytes(16).toString('hex'));
    return removed ? { removed, record: text } : { removed };
  }

  /** Throws unless LOCK still holds our record (called before publishing). */
  check(): void {
    if (this.released || readText(this.file) !== this.record)
      throw new MaxsimError(
        `${this.dir}: this writer no longer holds the corpus lock (${this.file} was removed or replaced); nothing was published`,
      );
  }

  /** Removes LOCK if it is still ours; idempotent. */
  release(): void {
    if (this.released) return;
    this.released = true;
    try {
      if (readText(this.file) === this.record) fs.rmSync(this.file, { force: true });
    } catch {
      // best effort: a lock left behind is stale once this process exits
    }
  }
}
