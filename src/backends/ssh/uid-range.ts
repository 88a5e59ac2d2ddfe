/*
 * The ids berth gives sandbox accounts on an SSH host, and how a new one is picked.
 *
 * A uid is never handed to a second sandbox: whatever the first one left behind (a file in a
 * shared dir, an IPC object, a process berth missed) would be the second one's. So each account
 * gets the next id above a root-owned high-water mark (`/var/lib/berth/uids/high-water`), taken
 * under a lock every berth on the host shares, and its group gets the same number.
 *
 * The range, 0x70000000 to 0x7FFDFFFF, is one nobody else allocates from (systemd's
 * UIDS-GIDS.md marks it unused): above regular users (1000-60000), systemd's homed and dynamic
 * users (60001-65519) and the 64 Ki blocks that /etc/subuid (shadow's default 100000-600100000)
 * and systemd-nspawn (524288-1879048191) lend to containers; below systemd's foreign-uid range
 * (0x7FFE0000) and 2^31, which some code (devpts, setfsuid) mishandles. 268 million ids: a new
 * sandbox every second for eight years. ids that /etc/passwd, /etc/group, NSS or an /etc/subuid
 * or /etc/subgid entry already hold are skipped. Such ids do not fit the ustar header (tar writes
 * them in GNU base-256, which tar-stream reads), and useradd gets --no-log-init, or it would
 * grow /var/log/lastlog (one record per uid up to the highest) to hundreds of GB, sparse.
 */

/** Root's alone (0700): a sandbox that could open the lock file could hold it, and stall every creation. */
export const UID_DIR = '/var/lib/berth/uids';

export const SANDBOX_UID_MIN = 0x7000_0000;
export const SANDBOX_UID_MAX = 0x7ffd_ffff;

/**
 * Bash: `next_uid` sets `uid` to a fresh id of the range (also free as a gid) and raises the mark
 * past it before anyone uses it; returns 1 when the lock or the mark cannot be had, 2 when the
 * range is used up. Without a mark (a new host, or someone deleted it) it starts above the
 * highest id of the range in /etc/passwd.
 */
export const NEXT_UID = `
uid_dir=${UID_DIR}
uid_mark=$uid_dir/high-water
in_subids() {
  local f a s c
  for f in /etc/subuid /etc/subgid; do
    [[ -r $f ]] || continue
    while IFS=: read -r a s c; do
      [[ $s =~ ^[0-9]+$ && $c =~ ^[0-9]+$ ]] && (( $1 >= s && $1 < s + c )) && return 0
    done < "$f"
  done
  return 1
}
next_uid() {
  local v= pu i um
  um=$(umask)
  umask 077
  mkdir -p -m 0700 -- "$uid_dir" && exec 8>>"$uid_dir/lock" && flock -w 60 8 || { exec 8>&-; umask "$um"; return 1; }
  { read -r v < "$uid_mark"; } 2>/dev/null
  if ! [[ $v =~ ^[0-9]+$ ]] || (( v < ${SANDBOX_UID_MIN - 1} )); then
    v=${SANDBOX_UID_MIN - 1}
    while IFS=: read -r _ _ pu _; do
      [[ $pu =~ ^[0-9]+$ ]] && (( pu > v && pu <= ${SANDBOX_UID_MAX} )) && v=$pu
    done < /etc/passwd
  fi
  for ((i = 0; i < 10000; i++)); do
    v=$((v + 1))
    (( v <= ${SANDBOX_UID_MAX} )) || { exec 8>&-; umask "$um"; return 2; }
    getent passwd "$v" >/dev/null || getent group "$v" >/dev/null || in_subids "$v" || break
  done
  (( i < 10000 )) || { exec 8>&-; umask "$um"; return 2; }
  printf '%s\\n' "$v" > "$uid_mark.tmp" && mv -f -- "$uid_mark.tmp" "$uid_mark" || { exec 8>&-; umask "$um"; return 1; }
  exec 8>&-
  umask "$um"
  uid=$v
}
`;
