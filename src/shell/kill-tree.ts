import { TAG_VAR } from './protocol.js';

/**
 * In-sandbox helper that kills one command's whole process tree, used for background jobs (see
 * broker/job-scripts.ts); shells use the warden (warden-script.ts), which needs no new process.
 * POSIX sh (dash, busybox ash); needs only /proc, `grep` and the `kill` builtin (`grep -z`: an environ file is NUL-separated, and
 * busybox `grep -F` never looks past its first NUL). Run as
 * `sh -c KILL_TREE_SCRIPT sh <shell pid> <tag> [protected pgid...]`: the tag is not a secret
 * (it is in the command's own env) and nothing secret is ever on argv.
 *
 * Targets, found afresh in each of three rounds (to catch processes forked meanwhile):
 * - processes whose environ carries `BERTH_CMD_TAG=<tag>` (escaped with `setsid`, double fork,
 *   reparented to init) and their descendants;
 * - descendants of the shell, skipping subtrees of protected process groups (background jobs
 *   of earlier commands) and of processes tagged by another command;
 * - every process group of a target, except the shell's own group (on a host backend that
 *   group is berth's) and the helper's own.
 * Never the shell itself, the helper, or pid 1. Other shells' commands carry other tags and are
 * not descendants of this shell, so they are never touched.
 */
export const KILL_TREE_SCRIPT = `
sp=$1; tag=$2; shift 2
prot=" $* "
me=$$
pgof() { { read -r l < "/proc/$1/stat"; } 2>/dev/null || return 1; r=\${l##*) }; set -- $r; echo "$3"; }
spg=$(pgof "$sp"); mpg=$(pgof "$me")
killed=0
round=0
while [ "$round" -lt 3 ]; do
  round=$((round + 1))
  ours=' '
  for f in $(grep -z -l -s -F "${TAG_VAR}=$tag" /proc/[0-9]*/environ 2>/dev/null); do
    p=\${f#/proc/}; ours="$ours\${p%/environ} "
  done
  other=' '
  for f in $(grep -z -l -s -F "${TAG_VAR}=" /proc/[0-9]*/environ 2>/dev/null); do
    p=\${f#/proc/}; p=\${p%/environ}
    case "$ours" in *" $p "*) ;; *) other="$other$p " ;; esac
  done
  T=''
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    { read -r l < "$d/stat"; } 2>/dev/null || continue
    r=\${l##*) }
    set -- $r
    T="$T$p $2 $3
"
  done
  tg=' '
  ch=1
  while [ "$ch" = 1 ]; do
    ch=0
    while read -r p pp pg; do
      [ -n "$p" ] || continue
      case " $me $sp 1 " in *" $p "*) continue ;; esac
      case "$tg" in *" $p "*) continue ;; esac
      case "$ours" in *" $p "*) tg="$tg$p "; ch=1; continue ;; esac
      case "$prot" in *" $pg "*) continue ;; esac
      case "$other" in *" $p "*) continue ;; esac
      case "$tg" in *" $pp "*) tg="$tg$p "; ch=1; continue ;; esac
      if [ "$pp" = "$sp" ]; then tg="$tg$p "; ch=1; fi
    done <<EOF
$T
EOF
  done
  [ "$tg" = ' ' ] && break
  groups=' '
  while read -r p pp pg; do
    case "$tg" in *" $p "*) ;; *) continue ;; esac
    case " 0 1 $spg $mpg $prot $groups " in *" $pg "*) continue ;; esac
    groups="$groups$pg "
  done <<EOF
$T
EOF
  for p in $tg; do kill -KILL "$p" 2>/dev/null && killed=$((killed + 1)); done
  for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
done
echo "$killed"
`;
