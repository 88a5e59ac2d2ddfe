import { SHELL_TAG_VAR, TAG_VAR } from './protocol.js';

/**
 * The warden: a bash that ends process trees inside a sandbox with builtins only. It never
 * forks or execs, so it still works when a fork bomb has taken every pid the sandbox may have
 * (then no `docker exec`, no `sh -c` and no `$(…)` can start). It is started before it is needed
 * (see warden.ts) and reads one operation per line; it can also run one operation from its
 * arguments (`bash -c WARDEN_SCRIPT berth-warden OP ID ARGS…`) as a helper through `execOnce`.
 *
 * Operations (every argument is a number, a base64url tag, or `-`; the reply is one line that
 * starts with ID):
 *   t ID SHELLPID SHELLTAG CMDTAG PGIDS   timeout: stop the shell, send it SIGUSR1 (its trap
 *        dumps the snapshot and exits before the next list element runs), end the command's
 *        tree, then continue the shell if it still catches SIGUSR1, else kill it.
 *        Reply: ID <killed> <cont|killed|gone> <full|ok>: `full` when the sandbox was out of
 *        pids and still is without the command's tree, its threads counted (containers only):
 *        what holds the pids is not the command, so a new shell cannot be counted on.
 *   c ID SHELLPID SHELLTAG CMDTAG PGIDS   end the command's tree only (shell alive).
 *   r ID SHELLPID SHELLTAG CMDTAG PGIDS   the same after the shell is gone: leftovers of the
 *        shell that are not in an earlier job's group, in its process group too.
 *   f ID SHELLPID SHELLTAG                end the shell and everything it started, earlier
 *        background jobs included.
 *   a ID                                  end every process but pid 1, itself and the container's
 *        main process (only where `__wall=1`: a container, never a host backend). Reply: ID 1|0.
 *   n ID                                  whether the sandbox's pids are (nearly) all taken,
 *        from its pids cgroup. Reply: ID full|ok.
 *   s ID SIGNAL PID                       send one signal.
 *   p ID                                  its own pid (a resident warden, attached to later).
 * PGIDS: process groups of earlier background jobs (kept alive), comma-separated, or `-`.
 *
 * What belongs to a command (modes c and r), found afresh in rounds until a round finds nothing
 * new, each process stopped (SIGSTOP) as soon as it is found and its process group with it, so
 * a bomb is frozen after the first hit and cannot outgrow the scan; then all are killed:
 * - processes carrying `BERTH_CMD_TAG=<tag>` in /proc/PID/environ (what was exec'd, also after
 *   `setsid`, a double fork or reparenting to init);
 * - descendants of the shell or of a target, unless in an earlier job's group or tagged by
 *   another command;
 * - processes carrying the shell's own tag (`BERTH_SHELL_TAG`, in the environ of every fork of
 *   the shell, exec'd or not) outside earlier jobs' groups and outside the shell's own group
 *   (there live the shell's process substitutions; mode r takes those too).
 * Process groups killed whole: those of targets, never pid 1's, the warden's, an earlier
 * job's, or the shell's own unless the shell leads it (on a host the shell's group may be
 * berth's own). Never the shell itself (but in mode f), the warden, or pid 1.
 *
 * A container out of pids is frozen whole first (`kill -STOP -1`, then `-CONT -1` once the
 * targets are dead): a bomb that is not this shell's would otherwise starve the scan of CPU for
 * many seconds. Each operation scans for at most ~6 s.
 */
export const WARDEN_SCRIPT = `
trap '' HUP INT QUIT TERM PIPE USR1 USR2
__wclass() {
  local e c=n s=0
  if [[ -n \${CM[$2]+x} ]]; then __c=\${CM[$2]} __s=\${SH[$2]}; return 0; fi
  { while IFS= read -r -d '' e; do
      case $e in
        "${TAG_VAR}=$__ct") c=c ;;
        ${TAG_VAR}=*) [[ $c == c ]] || c=o ;;
        "${SHELL_TAG_VAR}=$__st") s=1 ;;
      esac
    done < "$1/environ"; } 2>/dev/null
  CM[$2]=$c SH[$2]=$s __c=$c __s=$s
}
__wround() {
  local d p l r pp pg hit
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    [[ -n \${T[$p]+x} || $p == "$__me" || $p == 1 ]] && continue
    [[ $p == "$__sp" && $__mode != f ]] && continue
    { read -r l < "$d/stat"; } 2>/dev/null || continue
    r=\${l##*) }
    set -- $r
    [[ $1 == [ZX] ]] && continue
    pp=$2 pg=$3 hit=0
    if [[ $__mode == f ]]; then
      if [[ $p == "$__sp" || $pp == "$__sp" || -n \${T[$pp]+x} ]]; then hit=1
      else __wclass "$d" "$p:\${20}"; [[ $__s == 1 ]] && hit=1
      fi
    else
      [[ $__prot == *" $pg "* ]] && continue
      __wclass "$d" "$p:\${20}"
      if [[ $__c == c ]]; then hit=1
      elif [[ $__c == o ]]; then hit=0
      elif [[ $pp == "$__sp" || -n \${T[$pp]+x} ]]; then hit=1
      elif [[ $__s == 1 && ( $__mode == r || $pg != "$__spg" ) ]]; then hit=1
      fi
    fi
    (( hit )) || continue
    builtin kill -STOP "$p" 2>/dev/null
    T[$p]=$pg NT[$p]=\${18}
    __new=1
    [[ -n \${G[$pg]+x} || $pg == 0 || $pg == 1 || $pg == "$__mpg" || $__prot == *" $pg "* ]] && continue
    [[ $pg == "$__spg" ]] && ! [[ $__mode == f && $__spg == "$__sp" ]] && continue
    builtin kill -STOP -- "-$pg" 2>/dev/null
    G[$pg]=1
  done
}
# Sets __wc and __wm (pids in use, the limit) when the sandbox has a pids limit.
__wfull() {
  local c m d
  __wc=0 __wm=0
  for d in /sys/fs/cgroup/pids /sys/fs/cgroup; do
    { read -r c < "$d/pids.current" && read -r m < "$d/pids.max"; } 2>/dev/null || continue
    [[ $m == max ]] && return 1
    __wc=$c __wm=$m
    (( c + 8 >= m )) && return 0
    return 1
  done
  return 1
}
__wend() {
  __mode=$1 __sp=$2 __st=$3 __ct=$4 __prot=" \${5//,/ } " __wn=0 __wt=0 __wfrozen=0
  local -A T=() G=() CM=() SH=() K=() NT=()
  local l r p g i pass end=$((SECONDS + 6))
  __spg=0
  if { read -r l < "/proc/$__sp/stat"; } 2>/dev/null; then r=\${l##*) }; set -- $r; __spg=$3; fi
  [[ $__mode == f ]] && builtin kill -STOP "$__sp" 2>/dev/null
  # A sandbox out of pids is frozen whole first (containers only): a bomb that is not this
  # shell's would otherwise starve the scan of CPU. The caller lets it go on.
  if (( __wall )) && __wfull; then builtin kill -STOP -1 2>/dev/null; __wfrozen=1; fi
  for pass in 1 2; do
    T=() G=()
    for ((i = 0; i < 200 && SECONDS < end; i++)); do __new=0; __wround; (( __new )) || break; done
    # Counted once (one killed in the first pass may still be dying in the second), with its
    # threads: a sandbox's pids limit counts each (a JVM or a compiler may hold hundreds).
    for p in "\${!T[@]}"; do
      builtin kill -KILL "$p" 2>/dev/null && [[ -z \${K[$p]+x} ]] && K[$p]=1 __wn=$((__wn + 1)) __wt=$((__wt + NT[$p]))
    done
    for g in "\${!G[@]}"; do builtin kill -KILL -- "-$g" 2>/dev/null; done
    (( \${#T[@]} )) || break
  done
}
# Every process but pid 1, the warden and the container's main process (the oldest child of
# pid 1: with an init as pid 1, the container stops when that one ends), all frozen first.
__wall_end() {
  local d p l r keep=0 oldest=-1
  builtin kill -STOP -1 2>/dev/null
  for d in /proc/[0-9]*; do
    { read -r l < "$d/stat"; } 2>/dev/null || continue
    r=\${l##*) }
    set -- $r
    [[ $2 == 1 ]] || continue
    if (( oldest < 0 || \${20} < oldest )); then oldest=\${20} keep=\${d#/proc/}; fi
  done
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    [[ $p == 1 || $p == "$__me" || $p == "$keep" ]] && continue
    builtin kill -KILL "$p" 2>/dev/null
  done
  builtin kill -CONT -1 2>/dev/null
}
__wcatches() {
  local k v
  { while read -r k v; do
      [[ $k == SigCgt: ]] && { (( 0x$v & 0x200 )); return; }
    done < "/proc/$1/status"; } 2>/dev/null
  return 1
}
__wop() {
  local op=$1 id=$2 s f
  shift 2
  case $op in
    t) builtin kill -STOP "$1" 2>/dev/null; builtin kill -USR1 "$1" 2>/dev/null
       __wend c "$@"
       if __wcatches "$1"; then builtin kill -CONT "$1" 2>/dev/null && s=cont || s=gone
       else builtin kill -KILL "$1" 2>/dev/null && s=killed || s=gone; fi
       # Counted while the sandbox is still frozen, before anything can take the freed pids.
       (( __wfrozen && __wc - __wt + 8 >= __wm )) && f=full || f=ok
       (( __wfrozen )) && builtin kill -CONT -1 2>/dev/null
       builtin printf '%s %s %s %s\\n' "$id" "$__wn" "$s" "$f" ;;
    c|r) __wend "$op" "$@"; (( __wfrozen )) && builtin kill -CONT -1 2>/dev/null; builtin printf '%s %s\\n' "$id" "$__wn" ;;
    f) __wend f "$1" "$2" '!' -; (( __wfrozen )) && builtin kill -CONT -1 2>/dev/null; builtin printf '%s %s\\n' "$id" "$__wn" ;;
    a) if (( __wall )); then __wall_end; s=1; else s=0; fi
       builtin printf '%s %s\\n' "$id" "$s" ;;
    n) __wfull && s=full || s=ok; builtin printf '%s %s\\n' "$id" "$s" ;;
    s) builtin kill -s "$1" "$2" 2>/dev/null && s=1 || s=0; builtin printf '%s %s\\n' "$id" "$s" ;;
    p) builtin printf '%s %s\\n' "$id" "$__me" ;;
    *) builtin printf '%s ?\\n' "$id" ;;
  esac
}
__winit() {
  local l r
  __me=$$ __mpg=0 __wall=0
  if { read -r l < "/proc/$$/stat"; } 2>/dev/null; then r=\${l##*) }; set -- $r; __mpg=$3; fi
}
__winit
`;

/** One operation per line of stdin, until it ends. */
const READ_LOOP = 'while read -r -a __w; do (( ${#__w[@]} >= 2 )) && __wop "${__w[@]}"; done';

/**
 * The tail that makes WARDEN_SCRIPT a long-running warden reading operations from stdin.
 * `mayKillAll` (containers only) allows `a` and freezing a sandbox out of pids with `kill -1`.
 */
export function wardenLoop(mayKillAll: boolean): string {
  return `
__wall=${mayKillAll ? 1 : 0}
# A host shell's stdin is a FIFO it was given read-write: reopened read-only, so the end of berth's
# writer ends the loop (else the warden would wait for good, holding the FIFO open itself).
[ -p /dev/fd/0 ] && exec 0</dev/fd/0
builtin printf 'warden %s\\n' "$$"
${READ_LOOP}
`;
}

/**
 * The tail that makes WARDEN_SCRIPT a container's main process (a resident warden, see
 * warden.ts): the same loop on the container's stdin, which berth attaches to; several berth
 * processes may attach at once, and each keeps only the replies to its own ids. SIGTERM is not
 * ignored, so a `docker stop` ends it at once (the command's user could end it anyway, as it could
 * end any main process). Its input does not end while the container runs (the container keeps
 * stdin open: `StdinOnce` false), and when it ends, so does the container. Its first line,
 * `warden PID`, tells whoever attached before the start that bash runs (docker-backend.ts waits
 * for it: an image without bash ends at once instead).
 */
export const WARDEN_RESIDENT = `
trap - TERM
__wall=1
builtin printf 'warden %s\\n' "$$"
${READ_LOOP}
`;

/** The tail that makes WARDEN_SCRIPT run the one operation in its arguments (a helper run). */
export const WARDEN_ONCE = `
__wop "$@"
`;
