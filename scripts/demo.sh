#!/usr/bin/env bash
# berth's main job, end to end on real sandboxes: two conversations get their own sandboxes, a
# later process reattaches to the first with its cwd and files, and closing the sessions removes
# them.
#
# Which backend (BERTH_DEMO_BACKEND=docker|bwrap forces one):
#   1. docker, when a Docker engine answers (berth's default backend);
#   2. else bwrap, when berth's own bubblewrap probe passes here (no daemon to install or start);
#   3. else docker after installing/starting it (scripts/ensure-docker.sh: root on Debian);
#   4. else an error naming both ways to get a sandbox.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

[ -d node_modules ] || npm ci
[ -f dist/cli/main.js ] || npm run build

demo=$(mktemp -d)
# bwrap resolves its binds as each sandbox's unprivileged uid: the dir above its root must be traversable.
chmod 711 "$demo"
export BERTH_HOME="$demo/home"
berth() { node "$repo/bin/berth.js" "$@"; }
cleanup() {
  berth close --session alice >/dev/null 2>&1 || true
  berth close --session bob >/dev/null 2>&1 || true
  rm -rf "$demo"
}
trap cleanup EXIT

docker_config() {
  node bin/berth.js image build --variant minimal
  cat > "$demo/berth.yaml" <<'YAML'
backend: docker
persistent: false
docker:
  image: berth-sandbox:minimal
YAML
}

bwrap_config() {
  cat > "$demo/berth.yaml" <<YAML
backend: bwrap
persistent: false
bwrap:
  root: $demo/bwrap
YAML
}

# berth's own start-up check (the probe: user namespaces, /proc, the syscall filter), exit 125 when it fails.
bwrap_works() {
  bwrap_config
  (cd "$demo" && berth exec --session probe -- true >/dev/null 2>"$demo/bwrap-probe.txt") || return 1
  (cd "$demo" && berth close --session probe >/dev/null 2>&1) || true
}

backend=${BERTH_DEMO_BACKEND:-}
if [ -z "$backend" ]; then
  if docker info >/dev/null 2>&1; then backend=docker
  elif bwrap_works; then backend=bwrap
  elif bash scripts/ensure-docker.sh 3>/dev/null; then backend=docker
  else
    echo "demo: no Docker engine answers and could not be started, and bubblewrap sandboxes do not work here:" >&2
    cat "$demo/bwrap-probe.txt" >&2 2>/dev/null || true
    echo "demo: start a Docker engine, or install bubblewrap (apt-get install bubblewrap) and fix what the probe says; then run it again" >&2
    exit 1
  fi
fi
case $backend in
  docker) bash scripts/ensure-docker.sh 3>/dev/null; docker_config ;;
  bwrap) bwrap_config ;;
  *) echo "demo: BERTH_DEMO_BACKEND must be docker or bwrap, not \"$backend\"" >&2; exit 2 ;;
esac
echo "demo: backend $backend" >&2
cd "$demo"

show() {
  printf '\n$ berth'
  for a in "$@"; do case $a in *' '*) printf " '%s'" "$a" ;; *) printf ' %s' "$a" ;; esac; done
  printf '\n'
  berth "$@"
}
show explain --session alice
show exec --session alice -- 'echo "alice was here" > notes.txt; cd /tmp; hostname'
show exec --session bob -- 'cat /workspace/notes.txt 2>/dev/null || echo "bob cannot see the notes"; hostname'
show exec --session alice -- 'pwd; cat /workspace/notes.txt; hostname'
show ls
show close --session alice
show close --session bob
show ls
