import { chmodSync, closeSync, lstatSync, mkdirSync, openSync, type Stats } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';

/*
 * BERTH_HOME holds berth's state (sandbox records, token hashes, audit), staged exports, spilled
 * output and persistent sandbox dirs: nobody but berth's own user may read it. Whatever made the
 * files (an older berth, a umask of 022, a copy), opening the state makes them private again:
 * the home 0700, the database and its WAL files 0600, berth's own subdirs 0700.
 */

/** Subdirs of BERTH_HOME that are berth's own (exports, spill files, sandbox dirs). */
const OWN_DIRS = ['sandboxes', 'staging', 'spill'] as const;
const DB_FILE = 'state.db';
/** SQLite creates these beside the database, with the database file's own mode. */
const DB_SIDE_FILES = ['state.db-wal', 'state.db-shm'] as const;

function lstatOrUndefined(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Drops group and other bits (and set-id/sticky bits) from a file or dir berth's user owns. A
 * symlink is left alone: chmod would follow it to whatever it points at.
 */
function makePrivate(path: string, st: Stats | undefined = lstatOrUndefined(path)): void {
  if (st === undefined || st.isSymbolicLink() || st.uid !== process.getuid?.()) return;
  if ((st.mode & 0o7077) === 0) return;
  chmodSync(path, st.mode & 0o700);
}

/**
 * Whether BERTH_HOME itself is berth's to lock down: owned by berth's user, and not a dir that
 * others must reach (`/`, the user's home, a sticky shared dir such as /tmp), which a
 * misconfigured BERTH_HOME could name.
 */
function ownsHome(home: string, st: Stats): boolean {
  if (!st.isDirectory() || st.uid !== process.getuid?.()) return false;
  if ((st.mode & 0o1000) !== 0) return false;
  const abs = resolve(home);
  return abs !== '/' && abs !== resolve(homedir());
}

/** Creates BERTH_HOME if needed (0700) and makes berth's own files in it private. */
function prepareBerthHome(berthHome: string): void {
  mkdirSync(berthHome, { recursive: true, mode: 0o700 });
  const st = lstatSync(berthHome);
  if (ownsHome(berthHome, st)) makePrivate(berthHome, st);
  for (const dir of OWN_DIRS) {
    const p = join(berthHome, dir);
    const sub = lstatOrUndefined(p);
    if (sub?.isDirectory()) makePrivate(p, sub);
  }
}

/**
 * Opens `$BERTH_HOME/state.db` (WAL), creating it 0600, after making the home private. Every
 * connection to the state goes through here (the state store, the token store).
 */
export function openStateDb(berthHome: string): Database.Database {
  prepareBerthHome(berthHome);
  const path = join(berthHome, DB_FILE);
  // Created 0600 before SQLite opens it: its WAL files take the database file's mode.
  closeSync(openSync(path, 'a', 0o600));
  makePrivate(path);
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  for (const f of DB_SIDE_FILES) makePrivate(join(berthHome, f));
  return db;
}
