import { inSandboxNamespaces } from './namespaces.js';

/*
 * The kernel's grouping of an SSH sandbox's processes on its host: cgroup v2, under
 * `<cgroup2 mount>/berth-ssh/<account>` (berth-ssh is root's, 0700, so no account can even look
 * at another's groups). Every process the launcher starts joins the account's group as root,
 * before it enters the sandbox's namespaces and drops to the account, so nothing of the sandbox
 * runs outside it. A persistent shell is then moved by the agent (AGENT_SCRIPT) into a group of
 * its own, and each command it runs stays in the shell's group (or a fresh one), which no process
 * of the account can leave: the files are root's, and moving a process needs write access to
 * them. A timeout, a cancel or a job's kill ends the group whole, whatever its processes did to
 * their environment, session or process group (`env -i setsid`, a double fork).
 *
 * No controller is enabled in these groups (they only group, freeze and kill), so a process may
 * sit in a group that has children: cgroup v2's rule against that holds for controllers only.
 */

/**
 * Bash functions for root scripts: `cg_root` prints the cgroup2 mount point (the first in
 * /proc/self/mounts) or fails; `cg_base NAME` sets `cgb` to account NAME's group dir, which
 * `cg_make` makes (berth-ssh 0700 when it makes it: nothing else makes it).
 */
export const CGROUP_FUNCTIONS = `
cg_root() {
  local d at fs
  while read -r d at fs _; do [[ $fs == cgroup2 ]] && { printf '%s' "$at"; return 0; }; done < /proc/self/mounts
  return 1
}
cg_base() {
  local r
  r=$(cg_root) || return 1
  cgb=$r/berth-ssh/$1
}
cg_make() {
  local p=\${cgb%/*}
  [[ -d $cgb ]] && return 0
  [[ -d $p ]] || mkdir -m 0700 -- "$p" 2>/dev/null || [[ -d $p ]] || return 1
  mkdir -- "$cgb" 2>/dev/null || [[ -d $cgb ]]
}
`;

/**
 * Launcher stage 1 (root, host namespaces, account `$n` checked): makes the account's group and
 * moves this process into it; the waiter and the command it forks inherit it. A refusal is an
 * `E` line and exit 125, like the launcher's others.
 */
export const CGROUP_JOIN = `
cg_base "$n" || { printf 'E this host has no cgroup2 mount: berth groups each sandbox'"'"'s processes in one\\n'; exit 125; }
cg_make
echo "$$" > "$cgb/cgroup.procs" 2>/dev/null || { printf 'E cannot join the cgroup of sandbox %s (%s)\\n' "$n" "$cgb"; exit 125; }
`;

/**
 * For the account scripts' END_PROCESSES (root, host namespaces; `$n` the account): kills
 * whatever is left in the account's groups and removes them, innermost first. Processes killed
 * leave their group a moment later: each removal waits for that, at most 2 s in all.
 */
export const CGROUP_END = `
cg_end() {
  local cgb d i
  cg_base "$1" || return 0
  [[ -d $cgb ]] || return 0
  echo 1 > "$cgb/cgroup.kill" 2>/dev/null
  for ((i = 0; i < 200; i++)); do
    for d in "$cgb"/*/; do [[ -d $d ]] && rmdir -- "$d" 2>/dev/null; done
    rmdir -- "$cgb" 2>/dev/null && return 0
    [[ -d $cgb ]] || return 0
    sleep 0.01
  done
  return 1
}
`;

/**
 * For the host probe: `missing cgroups` when root cannot make, join and kill a group under the
 * cgroup2 mount (no cgroup2, or a kernel before 5.14 without cgroup.kill).
 */
export const CGROUP_PROBE = `
${CGROUP_FUNCTIONS}
cg_ok=0
if r=$(cg_root); then
  # 0700: no account may look at another's groups (an older berth's may have made it wider).
  { [[ -d $r/berth-ssh ]] || mkdir -m 0700 -- "$r/berth-ssh"; } 2>/dev/null && chmod 0700 -- "$r/berth-ssh" 2>/dev/null
  [[ -e $r/berth-ssh/cgroup.kill && -e $r/berth-ssh/cgroup.freeze ]] && cg_ok=1
fi
(( cg_ok )) || printf 'missing cgroups\\n'
`;

/**
 * The agent: a root bash in account `$1`'s namespaces (so pids are the sandbox's, as the launcher
 * reported them) that manages its command groups, one request per stdin line, one answer line
 * each (`ok ...`, or `E why`). Group names and pids are checked before use; a pid is acted on only
 * while it is a live process of the account. Requests:
 *   adopt PID G          move the shell PID into new group G
 *   prep PID CUR NEW     PID alone in CUR: `ok CUR`; else move it to new group NEW: `ok NEW` (CUR
 *                        goes if it emptied)
 *   move PID CUR G       move PID into new group G (a job's, or a fresh one); CUR goes if it emptied
 *   timeout PID G NEW MS freeze G, stop the shell PID, move it to NEW, kill the rest of G (waiting
 *                        up to MS for it to empty), remove G, then SIGUSR1 and SIGCONT the shell
 *                        if it catches SIGUSR1 (berth's trap), else kill it: `ok KILLED cont|killed|gone`
 *   kill G MS            kill group G whole: `ok KILLED`, or `ok none` when there is no such group
 *   rm G...              remove those of the groups that are empty: `ok` and the names still there
 */
export const AGENT_BODY = `
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LC_ALL=C
n=$1
${CGROUP_FUNCTIONS}
u=
while IFS=: read -r a _ uu _; do [[ $a == "$n" ]] && { u=$uu; break; }; done < /etc/passwd
[[ -n $u && $u != 0 ]] || { printf 'E no account %s\\n' "$n"; exit 0; }
cg_base "$n" || { printf 'E no cgroup2 mount\\n'; exit 0; }
cg_make || { printf 'E cannot make the cgroup of %s\\n' "$n"; exit 0; }
printf 'ready\\n'
# Checked with globs, not regexes: bash compiles a regex at each test (~40 µs), a glob costs ~5.
gname() { [[ $1 == [A-Za-z0-9]* && $1 != *[!A-Za-z0-9_-]* && \${#1} -le 80 ]]; }
pidok() { [[ $1 == [1-9]* && $1 != *[!0-9]* && \${#1} -le 10 ]]; }
msok() { [[ -n $1 && $1 != *[!0-9]* && \${#1} -le 6 ]]; }
ours() {
  local l S x
  { read -r l < "/proc/$1/stat"; } 2>/dev/null || return 1
  [[ \${l##*) } == Z* ]] && return 1
  { mapfile -t -n 16 S < "/proc/$1/status"; } 2>/dev/null || return 1
  for x in "\${S[@]}"; do
    if [[ $x == Uid:* ]]; then
      set -f
      set -- $x
      set +f
      [[ $2 == "$u" ]]
      return
    fi
  done
  return 1
}
# procs G: the group's pids in P (and its count in c); false when it is not there.
procs() {
  P=() c=0
  { mapfile -t P < "$cgb/$1/cgroup.procs"; } 2>/dev/null || return 1
  c=\${#P[@]}
}
move() {
  [[ -d $cgb/$2 ]] || mkdir -- "$cgb/$2" 2>/dev/null || return 1
  echo "$1" > "$cgb/$2/cgroup.procs" 2>/dev/null
}
event() {
  local k v
  { while read -r k v; do [[ $k == "$2" ]] && { [[ $v == 1 ]]; return; }; done < "$cgb/$1/cgroup.events"; } 2>/dev/null
  return 1
}
# until COND... up to MS: polls every 5 ms.
until_ms() {
  local ms=$1 i
  shift
  for ((i = 0; i <= ms / 5; i++)); do "$@" && return 0; sleep 0.005; done
  return 1
}
empty() { ! event "$1" populated; }
stopped() {
  local l
  { read -r l < "/proc/$1/stat"; } 2>/dev/null || return 0
  [[ \${l##*) } == [TtZX]* ]]
}
catches_usr1() {
  local k v
  { while read -r k v; do [[ $k == SigCgt: ]] && { (( (16#$v & 0x200) != 0 )); return; }; done < "/proc/$1/status"; } 2>/dev/null
  return 1
}
killg() {
  local g=$1 ms=$2
  procs "$g" || { K=none; return; }
  K=$c
  echo 1 > "$cgb/$g/cgroup.kill" 2>/dev/null
  until_ms "$ms" empty "$g"
  rmdir -- "$cgb/$g" 2>/dev/null
}
while IFS= read -r line; do
  set -f
  set -- $line
  set +f
  case \${1-}:$# in
    adopt:3)
      pidok "$2" && gname "$3" || { printf 'E bad request\\n'; continue; }
      ours "$2" || { printf 'E process %s is not one of the sandbox'"'"'s\\n' "$2"; continue; }
      move "$2" "$3" && printf 'ok\\n' || printf 'E cannot move process %s into group %s\\n' "$2" "$3" ;;
    prep:4 | move:4)
      pidok "$2" && gname "$3" && gname "$4" || { printf 'E bad request\\n'; continue; }
      # The shell alone in its group (the common case): it stays; only berth puts a process there.
      if [[ $1 == prep ]] && procs "$3" && (( c == 1 )) && [[ \${P[0]} == "$2" ]]; then printf 'ok %s\\n' "$3"; continue; fi
      ours "$2" || { printf 'E process %s is not one of the sandbox'"'"'s\\n' "$2"; continue; }
      if move "$2" "$4"; then rmdir -- "$cgb/$3" 2>/dev/null; printf 'ok %s\\n' "$4"; else printf 'E cannot move process %s into group %s\\n' "$2" "$4"; fi ;;
    timeout:5)
      pidok "$2" && gname "$3" && gname "$4" && msok "$5" || { printf 'E bad request\\n'; continue; }
      [[ -d $cgb/$3 ]] || { printf 'E no group %s\\n' "$3"; continue; }
      echo 1 > "$cgb/$3/cgroup.freeze" 2>/dev/null
      until_ms "$5" event "$3" frozen && fz=1 || fz=0
      sh=gone
      if ours "$2" && kill -STOP "$2" 2>/dev/null; then
        (( fz )) || until_ms 1000 stopped "$2"
        if move "$2" "$4"; then sh=cont; else sh=killed; fi
      fi
      killg "$3" "$5"
      if [[ $sh == cont ]]; then
        kill -USR1 "$2" 2>/dev/null
        if catches_usr1 "$2"; then kill -CONT "$2" 2>/dev/null || sh=gone; else kill -KILL "$2" 2>/dev/null && sh=killed || sh=gone; fi
      fi
      printf 'ok %s %s\\n' "\${K/none/0}" "$sh" ;;
    kill:3)
      gname "$2" && msok "$3" || { printf 'E bad request\\n'; continue; }
      killg "$2" "$3"
      printf 'ok %s\\n' "$K" ;;
    rm:*)
      shift
      left=()
      for g in "$@"; do gname "$g" || continue; rmdir -- "$cgb/$g" 2>/dev/null || { [[ -d $cgb/$g ]] && left+=("$g"); }; done
      printf 'ok%s\\n' "\${left[*]/#/ }" ;;
    *) printf 'E unknown request\\n' ;;
  esac
done
`;

/** AGENT_BODY in the sandbox's namespaces; without them (a stopped sandbox) it refuses at once. */
export const AGENT_SCRIPT = inSandboxNamespaces(AGENT_BODY, "printf 'E the sandbox has no namespaces (it was stopped)\\n'");
