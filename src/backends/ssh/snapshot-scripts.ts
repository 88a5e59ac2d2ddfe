import { END_PROCESSES, OWNED, PREAMBLE } from './account-scripts.js';

/*
 * Root helpers for the snapshots of sandbox accounts (snapshots.ts), run through the pool like
 * the account helpers. Arguments: account name, home root, installation, and for a restore the
 * name of its staging dir in the home. Files are read and written as the account itself
 * (setpriv, no_new_privs), never as root: a snapshot holds only what the sandbox could read (a
 * link or hard link it planted to a host file gives nothing), and what a restore unpacks is
 * created by the account, so it is the account's and cannot be made setuid anything else.
 * Refusals go to stderr (`E <why>`, exit 125): stdout may be an archive.
 */

/** The account `$n` under `$root` of this installation, its uid, gid and home in `u g h`, and `asu` to run a command as it. */
const ACCOUNT = `
die() { printf 'E %s\\n' "$*" >&2; exit 125; }
valid "$n"
${OWNED}
IFS=: read -r _ _ u g _ h _ < <(getent passwd "$n")
[[ \${u-} =~ ^[0-9]+$ && $u != 0 && \${h-} == "$root/$n" ]] || die "account $n is not a sandbox account of $root on this host (gone?)"
[[ -d $h && ! -L $h ]] || die "home $h is not a directory"
# The account may not enter root's cwd, and tar opens its cwd first.
cd / || die "cannot enter /"
asu() { env -i PATH=/usr/bin:/bin LC_ALL=C "$(command -v setpriv)" --reuid="$u" --regid="$g" --clear-groups --no-new-privs -- "$@" 6>&-; }
`;

/** A staging dir's name: berth makes it, `.berth-restore-` and 16 hex digits. */
const STAGE = `[[ $stage =~ ^\\.berth-restore-[0-9a-f]{16}$ ]] || die "$stage is not a staging dir berth makes"`;

/**
 * Ends every process of the account (its files stay, as at a stop) and prints
 * `sizes WORKSPACE HOME`: apparent bytes (links not followed) of its workspace and of its whole
 * home, measured as the account. A tree it cannot read fails the measure (and so the snapshot).
 */
export const SNAP_MEASURE_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=$3
${ACCOUNT}
holder_lock "$n" || die "cannot take the lock of account $n"
${END_PROCESSES}
ws=$(asu du -s -B1 --apparent-size -P -- "$h/workspace" 2>&1) || die "du of $h/workspace: \${ws##*$'\\n'}"
all=$(asu du -s -B1 --apparent-size -P -- "$h" 2>&1) || die "du of $h: \${all##*$'\\n'}"
printf 'sizes %s %s\\n' "\${ws%%[[:space:]]*}" "\${all%%[[:space:]]*}"
`;

/**
 * Writes a tar archive of the account's home to stdout (one top entry, `home`), read
 * as the account with its processes ended and its lock held (no spawn starts one meanwhile):
 * links stored as links, nothing of another filesystem, numeric owners, setuid and setgid bits
 * dropped from every entry.
 */
export const SNAP_PACK_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=$3
${ACCOUNT}
holder_lock "$n" || die "cannot take the lock of account $n"
${END_PROCESSES}
# From inside the home (the account cannot open the root-owned root); its entries under one
# top entry, home (links' targets untouched).
asu tar -c -f - -C "$h" --one-file-system --numeric-owner --mode=u-s,g-s --transform='s,^\\.,home,S' -- .
`;

/**
 * Unpacks the archive on stdin (entries \`./…\`) into a new staging dir \`$h/$stage\`, as the
 * account: every file is the account's, modes as archived, setuid and setgid bits cleared; the
 * shells' saved state of another account \`$from\` is made to name this one. On failure the
 * staging dir goes. Prints \`staged\`.
 */
export const SNAP_STAGE_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=$3 stage=$4 from=$5
${ACCOUNT}
${STAGE}
valid "$from"
asu mkdir -m 0700 -- "$h/$stage" || die "cannot create $h/$stage"
if ! out=$(asu bash --noprofile --norc -c 'umask 0 && tar -x -f - -C "$1" --no-same-owner --no-same-permissions --delay-directory-restore && find "$1" -xdev ! -type l -perm /6000 -exec chmod ug-s -- {} +' berth-stage "$h/$stage" 2>&1); then
  rm -rf --one-file-system -- "$h/$stage"
  die "the snapshot could not be unpacked into $h: \${out##*$'\\n'}"
fi
# Taken from another account (a fork): its shells' saved state names that account and its home
# (HOME, USER, TMPDIR, paths under them); it is made to name this one.
if [[ $from != "$n" && -d $h/$stage/.berth/shells ]] && ! out=$(asu find "$h/$stage/.berth/shells" -maxdepth 1 -type f -name '*.sh' -exec sed -i -e "s/$from/$n/g" -- {} + 2>&1); then
  rm -rf --one-file-system -- "$h/$stage"
  die "the shells' saved state could not be moved to $n: \${out##*$'\\n'}"
fi
printf 'staged\\n'
`;

/**
 * Puts the staged files in place of the home's: every process of the account ends (its lock
 * held), its entries move aside, the staged ones move in, and the old ones go; a move that fails
 * puts the old entries back. Renames only, in a home no process of the account runs in, so
 * nothing is followed. Prints \`swapped\`.
 */
export const SNAP_SWAP_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=$3 stage=$4
${ACCOUNT}
${STAGE}
s=$h/$stage o=$h/$stage.old
[[ -d $s && ! -L $s ]] || die "staging dir $s is gone"
holder_lock "$n" || die "cannot take the lock of account $n"
${END_PROCESSES}
shopt -s dotglob nullglob
rm -rf --one-file-system -- "$o"
mkdir -m 0700 -- "$o" || die "cannot create $o"
back() {
  local e
  for e in "$h"/*; do [[ $e == "$s" || $e == "$o" ]] || rm -rf --one-file-system -- "$e"; done
  for e in "$o"/*; do mv -- "$e" "$h"/; done
  rm -rf --one-file-system -- "$s" "$o"
  die "$1; the home was put back as it was"
}
for e in "$h"/*; do
  [[ $e == "$s" || $e == "$o" ]] && continue
  mv -- "$e" "$o"/ || back "cannot move $e aside"
done
for e in "$s"/*; do mv -- "$e" "$h"/ || back "cannot move $e into place"; done
rm -rf --one-file-system -- "$s" "$o"
printf 'swapped\\n'
`;

/** Removes a staging dir a restore left (its stream was cut, or the swap never ran). Prints `dropped`. */
export const SNAP_DROP_SCRIPT = `${PREAMBLE}
n=$1 root=$2 inst=$3 stage=$4
${ACCOUNT}
${STAGE}
rm -rf --one-file-system -- "$h/$stage" "$h/$stage.old"
printf 'dropped\\n'
`;
