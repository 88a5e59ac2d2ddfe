import { randomBytes } from 'node:crypto';
import { partialSuffix } from '../kit/redaction.js';

/**
 * The wire protocol between berth and one persistent bash.
 *
 * At start the transport's bash re-executes itself to read its commands from the control pipe
 * on fd 255 (close-on-exec) with fd 0 on /dev/null, so no command can read the control stream
 * and no per-command redirection is needed. (When stdin is not a pipe, e.g. a socket that
 * /dev/fd cannot reopen, it stays as it is and each command gets `</dev/null` instead.)
 *
 * Bash reads a pipe one byte per syscall (it cannot seek back over what a command should read
 * next), and each of those reads costs about as much as interpreting a short command: so the
 * line bash parses per command is only `__r`, an alias that reads the rest of the frame with two
 * `read -N` calls (a syscall each, whatever the length) and evals it at top level:
 *
 *   __r\n LLLLLLLL BODY          (LLLLLLLL: BODY's length, 8 decimal digits, no spaces)
 *   BODY = __bs TAG NONCE;eval 'CMD';__be $? NONCE [flags]
 *
 * - BODY is ASCII (non-ASCII bytes travel as `$'\ooo'` escapes), so its length in bytes is
 *   its length in characters whatever the shell's locale (`read -N` counts characters).
 * - `CMD` is single-quoted with every `'` written as `'\''`: injection-proof for any text
 *   without NUL bytes. `__bs` drops the variable that held BODY before the command runs.
 * - `eval` runs at top level (inside a brace group when stdin is redirected), so `cd`,
 *   `export`, `declare -x`, functions and aliases persist as in an interactive shell. A user
 *   who turns aliases off (or removes ours) gets the function `__r` instead, which runs that one
 *   command inside a function and turns them back on.
 * - `__bs` prints `NONCE^` on stdout before anything of the command runs: a shell that ended
 *   without it, where no byte can have been lost on the way, never began the command (it died
 *   between commands, and berth had not seen it yet; see `Outcome` in shell-conn.ts).
 * - `__be` prints on stderr `NONCE~NONCE~`, with the pids of running jobs in between when they
 *   may have changed, then `NONCE~<status> <PWD>NONCE~` on stdout in one write (stderr first,
 *   so both usually reach berth in the same poll; the reader waits for both anyway). The
 *   `~` comes from the printf format, so the key `NONCE~` never appears in the frame text
 *   (xtrace, `set -v` and DEBUG traps echo the frame, never the key). The nonce is a fresh
 *   96-bit value per command and is never left in a shell variable while the command runs.
 * - The init script travels the same way (after two bootstrap lines), so a new shell is not
 *   read byte by byte either.
 */

/** Env var carrying the per-command tag, visible in /proc/<pid>/environ of every exec'd descendant. */
export const TAG_VAR = 'BERTH_CMD_TAG';

/**
 * Env var carrying the shell's own tag, set when the shell process starts: it is in the
 * /proc/<pid>/environ of everything the shell forks, exec'd or not (a forked subshell shows the
 * environ its process started with), so even a bash-only fork bomb can be told apart.
 */
export const SHELL_TAG_VAR = 'BERTH_SHELL_TAG';

const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function isShellName(name: string): boolean {
  return NAME_RE.test(name);
}

/**
 * base64url tokens (alphabet has no `~`, `%`, `\`, spaces or quotes) from the CSPRNG, drawn in
 * blocks: one `randomBytes` call per command costs more than the rest of the frame.
 */
export class TokenSource {
  private pool: Buffer = Buffer.alloc(0);
  private at = 0;

  next(bytes: number): string {
    if (this.at + bytes > this.pool.length) {
      this.pool = randomBytes(Math.max(1024, bytes));
      this.at = 0;
    }
    const s = this.pool.toString('base64url', this.at, this.at + bytes);
    // Never reuse the bytes.
    this.pool.fill(0, this.at, this.at + bytes);
    this.at += bytes;
    return s;
  }
}

/** Single-quote for bash/sh. The input must not contain NUL. */
export function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Quote for bash with ASCII only: single quotes when the text is ASCII, else `$'...'` with
 * every byte from 0x80 up as an octal escape (and `\\`, `'` escaped), which bash decodes back
 * to the same bytes in any locale. The input must not contain NUL.
 */
function asciiQuote(s: string): string {
  // eslint-disable-next-line no-control-regex
  if (/^[\x01-\x7f]*$/.test(s)) return shQuote(s);
  let out = "$'";
  for (const b of Buffer.from(s, 'utf8')) {
    if (b === 0x5c) out += '\\\\';
    else if (b === 0x27) out += "\\'";
    else if (b < 0x80) out += String.fromCharCode(b);
    else out += `\\${b.toString(8).padStart(3, '0')}`;
  }
  return `${out}'`;
}

/** Digits of a frame's length field. */
const LENGTH_DIGITS = 8;

/** The bytes that make bash read `body` in two syscalls and eval it at top level (see the file comment). */
function framed(body: string): string {
  // eslint-disable-next-line no-control-regex
  if (!/^[\x00-\x7f]*$/.test(body)) throw new Error('berth bug: a frame body must be ASCII');
  const len = String(body.length);
  if (len.length > LENGTH_DIGITS) throw new Error(`a command of ${body.length} characters is too long for one frame`);
  return `__r\n${len.padStart(LENGTH_DIGITS, '0')}${body}`;
}

/**
 * Encode arbitrary bytes as a bash `printf` format string (ASCII only, to be single-quoted):
 * printable bytes stay, `%` and `\` are escaped, everything else becomes a 3-digit octal escape.
 */
export function printfFormat(data: Buffer): string {
  let out = '';
  for (const b of data) {
    if (b === 0x25) out += '%%';
    else if (b === 0x5c) out += '\\\\';
    else if (b >= 0x20 && b < 0x7f && b !== 0x27) out += String.fromCharCode(b);
    else out += `\\${b.toString(8).padStart(3, '0')}`;
  }
  return out;
}

export interface FrameInput {
  command: string;
  nonce: string;
  tag: string;
  workdir?: string | undefined;
  /** printf format of the stdin bytes (see `printfFormat`), or undefined for /dev/null. */
  stdinFormat?: string | undefined;
  /** In-sandbox file used to hand stdin over. */
  stdinPath: string;
  /** The shell's fd 0 is /dev/null already (it re-executed onto the control pipe). */
  stdinIsNull: boolean;
  /** The last report had running jobs: report them again even if `$!` did not change. */
  hadJobs: boolean;
}

/** The frame that runs one command. */
export function buildFrame(f: FrameInput): string {
  let line = `__bs ${f.tag} ${f.nonce};`;
  let flags = '';
  let redirect = f.stdinIsNull ? '' : '</dev/null';
  if (f.stdinFormat !== undefined) {
    const path = asciiQuote(f.stdinPath);
    // `>|`: a user's `set -C` must not keep stale stdin.
    line += `builtin printf ${shQuote(f.stdinFormat)} >|${path};`;
    redirect = `<${path}`;
    flags += 's';
  }
  if (f.workdir !== undefined) {
    line += `__bw ${asciiQuote(f.workdir)}&&`;
    flags += 'w';
  }
  if (f.hadJobs) flags += 'j';
  const run = `eval ${asciiQuote(f.command)}`;
  line += redirect === '' ? `${run};` : `{ ${run};}${redirect};`;
  line += `__be $? ${f.nonce}`;
  if (flags !== '') line += ` ${flags}`;
  return framed(line);
}

export interface InitInput {
  nonce: string;
  /** `${stateDir}/shells` */
  shellsDir: string;
  snapshotPath: string;
  stdinPath: string;
  secretNames: readonly string[];
  /** Directories to try in order; `SNAPSHOT_CWD` stands for the cwd recorded in the snapshot. */
  cwdCandidates: readonly string[];
  /** This shell's tag (also in its env as `SHELL_TAG_VAR`): the last line of its snapshots. */
  shellTag: string;
  /** When the snapshot found was written by the shell with this tag, its cwd is tried first. */
  preferSnapshotOf?: string | undefined;
}

/** Placeholder in `InitInput.cwdCandidates` for the snapshot's recorded cwd. */
export const SNAPSHOT_CWD = '\u0000snapshot';

/** Variables never written to the snapshot, besides the secret names. */
const NOT_SNAPSHOTTED = ['PWD', 'OLDPWD', 'SHLVL', '_', TAG_VAR, SHELL_TAG_VAR, 'BASHOPTS', 'SHELLOPTS', 'BASH_ENV', 'ENV'];

/** Functions, variables and aliases of ours, never written to the snapshot. */
const OUR_FUNCTIONS = ['__bs', '__be', '__bw', '__bd', '__r'];
const OUR_VARIABLES = ['__bg', '__bk', '__bl', '__bwp', '__bwo', '__bu', '__ba', '__bn', '__bc'];
const OUR_ALIASES = ['__r'];

/**
 * The script sent once to a fresh bash. It saves the secrets as granted, sources the snapshot
 * at top level (so `declare -x` stays global), defines our helpers and traps, picks the first
 * existing cwd, and ends with the same trailer as a command, carrying `$$` as the status and,
 * as stdout payload, `p` or `n` (fd 0 still the pipe, or /dev/null), `:` and the tag of the
 * shell that wrote the snapshot it loaded (empty when none was loaded).
 *
 * The snapshot is dumped (`__bd`) only when the shell is about to end: at close, on SIGUSR1
 * (a timeout) and on exit. It forks nothing, so a sandbox out of pids cannot stop it: it
 * unsets secrets and our own names in place (the shell ends anyway), writes with builtins and
 * `exec`s `mv` for the atomic rename, which replaces the shell instead of forking (on exit a
 * forked `mv` keeps the command's exit status). Its last line names the writer's tag, so the
 * next shell tells exactly whose state it restored; a dump that did not complete leaves the
 * previous snapshot and says so.
 */
export function buildInit(i: InitInput): string {
  const secrets = i.secretNames;
  const q = asciiQuote;
  const snap = q(i.snapshotPath);
  const tmp = q(`${i.snapshotPath}.tmp`);
  // Two lines bash reads byte by byte. The first re-executes it to read the rest from the pipe
  // on fd 255 (close-on-exec) with fd 0 on /dev/null; the pid stays. The second, possibly in the
  // new bash, finds that fd (bash puts its script on the highest free fd up to 255), closes the
  // copy on fd 3 and reads the rest of the init as one frame.
  const boot = [
    `[ -p /dev/fd/0 ] && exec "$BASH" --noprofile --norc /dev/fd/3 3<&0 0</dev/null`,
    'for __bu in 255 254 253 252 251 250 0; do [ "$__bu" = 0 ] || [ /dev/fd/$__bu -ef /dev/fd/3 ] && break; done; { exec 3<&-; } 2>/dev/null; ' +
      'if [ "$__bu" = 0 ] && [ /dev/fd/0 -ef /dev/null ]; then echo "berth: the shell cannot find its control pipe" >&2; exit 125; fi; ' +
      `builtin read -r -N ${LENGTH_DIGITS} -u "$__bu" __bn && builtin read -r -N $((10#$__bn)) -u "$__bu" __bc && eval "$__bc"`,
  ];
  const lines: string[] = [];
  // Name the shell for error messages, report how stdin is wired.
  lines.push(`unset -v __bc __bn; BASH_ARGV0=bash; [ /dev/fd/0 -ef /dev/null ] && __bm=n || __bm=p`);
  lines.push('set -m');
  lines.push('shopt -s expand_aliases');
  // __r: read a frame and eval it at top level (the alias); the function stands in when aliases are off.
  lines.push(`__ba="builtin read -r -N ${LENGTH_DIGITS} -u $__bu __bn&&builtin read -r -N \\$((10#\\$__bn)) -u $__bu __bc&&eval \\"\\$__bc\\""`);
  lines.push('__r(){ builtin shopt -s expand_aliases; builtin alias __r="$__ba"; builtin eval "$__ba"; }');
  // After the function: once the alias exists, `__r(){` would expand.
  lines.push('builtin alias __r="$__ba"');
  lines.push(shellsDirCommand(i.shellsDir));
  // Secrets as granted at shell start, before anything else can change them.
  for (const n of secrets) {
    lines.push(`if [ -n "\${${n}+x}" ]; then __bsv_${n}=$${n}; else unset -v __bsv_${n}; fi`);
  }
  lines.push(`if [ -f ${snap} ]; then . ${snap} 2>/dev/null; fi`);
  lines.push(`__bg=${q(i.shellTag)}; __bk=\${__berth_gen-}; unset -v __berth_gen`);
  // __bs: per-command prologue (the frame's text is dropped, tag + secrets afresh, the begin
  // marker when a nonce is given). Must return 0 (a user may `set -e`).
  const reexport = secrets.map((n) => `[ -n "\${__bsv_${n}+x}" ] && builtin export ${n}="$__bsv_${n}";`).join(' ');
  lines.push(`__bs(){ builtin unset -v __bc __bn; builtin export ${TAG_VAR}=$1; ${reexport} case \${2-} in ?*) builtin printf '%s^' "$2" || builtin :;; esac; return 0; }`);
  // __bw: one-off workdir. A missing one is berth not running the command: 125, as env(1) and
  // timeout(1) answer for their own failures, never a code the command itself could have given.
  lines.push(
    `__bw(){ __bwp=\${PWD-}; __bwo=\${OLDPWD-}; CDPATH= builtin cd -- "$1" 2>/dev/null && return 0; ` +
      `builtin printf 'berth: workdir %s does not exist or is not a directory; the command was not run\\n' "$1" >&2; return 125; }`,
  );
  // __be: epilogue, trailers on stdout and stderr.
  lines.push(
    `__be(){ case \${3-} in *w*) CDPATH= builtin cd -- "\${__bwp-}" 2>/dev/null; OLDPWD=\${__bwo-};; esac; ` +
      `case \${3-} in *s*) : >|${q(i.stdinPath)};; esac; ` +
      `local __f=\${3-}; if [ "\${!:-}" = "\${__bl-}" ] && [ "$__f" = "\${__f#*j}" ]; then builtin printf '%s~%s~' "$2" "$2" >&2; ` +
      `else __bl=\${!:-}; { builtin printf '%s~' "$2"; builtin jobs -pr; builtin printf '%s~' "$2"; } >&2; fi; ` +
      `builtin printf '%s~%d %s%s~' "$2" "$1" "\${PWD-}" "$2"; return 0; }`,
  );
  // __bd [x]: dump the snapshot (0600, atomic rename) as the shell ends; `x`: exec the rename.
  const unsetVars = [...NOT_SNAPSHOTTED, ...secrets, ...OUR_VARIABLES].join(' ');
  lines.push(
    `__bd(){ builtin trap '' USR1; builtin set +ex; local __c=\${PWD-} __g=\${__bg-} __x=\${1-}; ` +
      `builtin unset -v ${unsetVars} 2>/dev/null; builtin unset -f ${OUR_FUNCTIONS.join(' ')}; builtin unalias ${OUR_ALIASES.join(' ')} 2>/dev/null; builtin umask 077; ` +
      `{ builtin export -p; builtin declare -f; builtin alias -p; builtin printf '__berth_cwd=%q\\n__berth_gen=%q\\n' "$__c" "$__g"; } >|${tmp} 2>/dev/null || return 1; ` +
      `[ -n "$__x" ] && builtin exec mv -f -- ${tmp} ${snap} 2>/dev/null; builtin command mv -f -- ${tmp} ${snap} 2>/dev/null; }`,
  );
  lines.push(`trap __bd EXIT`);
  lines.push(`trap '__bd x; builtin trap - EXIT; builtin exit 143' USR1`);
  // Secrets win over anything the snapshot may have held under the same name.
  if (secrets.length > 0) lines.push('__bs x');
  const candidates = i.cwdCandidates.map((c) => (c === SNAPSHOT_CWD ? '"${__berth_cwd-}"' : q(c))).join(' ');
  const pick = (list: string): string => `for __d in ${list}; do [ -n "$__d" ] && CDPATH= builtin cd -- "$__d" 2>/dev/null && break; done`;
  if (i.preferSnapshotOf !== undefined) {
    lines.push(`if [ "$__bk" = ${q(i.preferSnapshotOf)} ]; then ${pick(`"\${__berth_cwd-}" ${candidates}`)}; else ${pick(candidates)}; fi`);
  } else {
    lines.push(pick(candidates));
  }
  lines.push('unset -v __d __berth_cwd');
  // Stdout payload of the init: `p` when fd 0 is the pipe still (commands need </dev/null), and whose snapshot was loaded.
  lines.push(`builtin printf '%s:%s' "$__bm" "$__bk"; unset -v __bm __bk; __be $$ ${i.nonce} j`);
  return `${boot.join('\n')}\n${framed(lines.join('\n')).slice('__r\n'.length)}`;
}

/**
 * The command that makes the shells' state dir: 0700, as snapshots hold the user's env. A fork
 * and two execs cost milliseconds in a container, so a dir this user already owns (made by an
 * earlier shell, or ahead of time in a warm-pool sandbox) is left as it is. Run by the shell
 * itself, as the user its snapshots belong to.
 */
export function shellsDirCommand(shellsDir: string): string {
  const d = asciiQuote(shellsDir);
  return `{ [ -d ${d} ] && [ -O ${d} ] && ! [ -L ${d} ]; } || (umask 077 && mkdir -p -- ${d} && exec chmod 700 -- ${d}) 2>/dev/null`;
}

/** The init's stdout payload: how stdin is wired, and the tag of the shell whose snapshot was loaded ('' if none). */
export function parseInitPayload(text: string): { stdinIsNull: boolean; loadedFrom: string } | undefined {
  const m = /([pn]):([A-Za-z0-9_-]*)$/.exec(text);
  if (m === null) return undefined;
  return { stdinIsNull: m[1] === 'n', loadedFrom: m[2] as string };
}

/**
 * A new shell's first line where berth must find its process before the init runs (to put it in
 * its command group): bash answers one newline on stderr as soon as it runs and reads it, which
 * berth waits for instead of polling. Between exchanges the shell's output is dropped.
 */
export const STARTED_LINE = "builtin printf '\\n' >&2\n";

/**
 * The line that makes an idle shell dump its state and exit. Bash runs a trap only between
 * commands, never while it waits for its next line, so after a timeout this line is sent as
 * well: it runs only if the trap did not (the command had just ended, or bash gave up a fork).
 * A command never reads it: commands get /dev/null on stdin.
 */
export const DUMP_AND_EXIT = '__bd x;builtin trap - EXIT;builtin exit 143\n';

/** The stdout trailer (between the two keys): `<status> <PWD>`. */
export function parseStdoutTrailer(t: Buffer): { status: number; cwd: string } | undefined {
  const s = t.toString('utf8');
  const sp = s.indexOf(' ');
  if (sp <= 0) return undefined;
  const status = Number(s.slice(0, sp));
  if (!Number.isInteger(status)) return undefined;
  return { status, cwd: s.slice(sp + 1) };
}

/** The stderr trailer: pids (= process group ids) of running jobs, one per line. */
export function parseStderrTrailer(t: Buffer): number[] {
  const pids: number[] = [];
  for (const line of t.toString('utf8').split('\n')) {
    const n = Number(line.trim());
    if (line.trim() !== '' && Number.isInteger(n) && n > 0) pids.push(n);
  }
  return pids;
}

/** The begin marker `__bs` prints on stdout (`^` from its printf format, never in the frame's text). */
export function beginKey(nonce: string): Buffer {
  return Buffer.from(`${nonce}^`);
}

/**
 * Drops the begin marker from one stream, the first time it appears, and says whether it did:
 * everything else goes on to `next` in order (bytes before it are output of background jobs).
 * Holds back only an end of a chunk that could be the start of the marker.
 */
export class BeginScanner {
  private carry: Buffer = Buffer.alloc(0);
  seen = false;

  constructor(
    private readonly key: Buffer,
    private readonly next: (chunk: Buffer) => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.seen) {
      this.next(chunk);
      return;
    }
    const data = this.carry.length === 0 ? chunk : Buffer.concat([this.carry, chunk]);
    const at = data.indexOf(this.key);
    if (at >= 0) {
      this.seen = true;
      this.carry = Buffer.alloc(0);
      if (at > 0) this.next(data.subarray(0, at));
      if (at + this.key.length < data.length) this.next(data.subarray(at + this.key.length));
      return;
    }
    const emit = data.length - partialSuffix(data, this.key);
    if (emit > 0) this.next(data.subarray(0, emit));
    this.carry = Buffer.from(data.subarray(emit));
  }

  /** Bytes still held back (the stream ended without the marker). */
  flush(): void {
    if (this.carry.length > 0) this.next(this.carry);
    this.carry = Buffer.alloc(0);
  }
}

/**
 * Splits one stream into the command's payload (everything before the first key) and the
 * trailer (between the first and the second key). Holds back only an end of a chunk that could
 * be the start of the key, so a split key is found and output is not delayed (which would also
 * skew the order of stdout against stderr). Binary-safe: works on bytes.
 */
export class MarkerScanner {
  private carry: Buffer = Buffer.alloc(0);
  private trailerParts: Buffer[] | undefined;
  private trailerLen = 0;
  trailer: Buffer | undefined;

  constructor(
    private readonly key: Buffer,
    private readonly onPayload: (chunk: Buffer) => void,
  ) {}

  get done(): boolean {
    return this.trailer !== undefined;
  }

  push(chunk: Buffer): void {
    if (this.done) return;
    if (this.trailerParts !== undefined) {
      this.pushTrailer(chunk);
      return;
    }
    const data = this.carry.length === 0 ? chunk : Buffer.concat([this.carry, chunk]);
    const at = data.indexOf(this.key);
    if (at >= 0) {
      if (at > 0) this.onPayload(data.subarray(0, at));
      this.carry = Buffer.alloc(0);
      this.trailerParts = [];
      this.pushTrailer(data.subarray(at + this.key.length));
      return;
    }
    const emit = data.length - partialSuffix(data, this.key);
    if (emit > 0) this.onPayload(data.subarray(0, emit));
    this.carry = Buffer.from(data.subarray(emit));
  }

  /** Payload still held back (the stream ended without a marker). */
  flush(): void {
    if (this.trailerParts === undefined && this.carry.length > 0) this.onPayload(this.carry);
    this.carry = Buffer.alloc(0);
  }

  private pushTrailer(chunk: Buffer): void {
    const parts = this.trailerParts as Buffer[];
    if (chunk.length > 0) {
      parts.push(Buffer.from(chunk));
      this.trailerLen += chunk.length;
    }
    const all = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, this.trailerLen);
    const end = all.indexOf(this.key);
    if (end >= 0) {
      this.trailer = all.subarray(0, end);
      this.trailerParts = [];
      return;
    }
    this.trailerParts = [all];
  }
}
