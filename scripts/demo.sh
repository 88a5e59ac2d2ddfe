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
# On docker it builds (or reuses) the image your own config names (docker.image, by default
# berth-sandbox:latest), so the `berth exec` you run next finds it. It installs only what is
# missing, in one line each, with apt's output in a log file.
set -euo pipefail
user_cwd=$PWD
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export BERTH_APT_LOG=${BERTH_APT_LOG:-/tmp/berth-demo-apt.log}

[ -d node_modules ] || npm ci
[ -f dist/cli/main.js ] || npm run build

berth() { node "$repo/bin/berth.js" "$@"; }
# The image a `berth exec` run from your directory uses (your berth.yaml or $BERTH_HOME/config.yaml, else the default).
your_image() {
  (cd "$user_cwd" && berth config check) | node -e '
    let text = "";
    process.stdin.on("data", (d) => (text += d)).on("end", () => console.log(require("yaml").parse(text).docker.image));'
}
image=$(your_image)
user_berth_home=${BERTH_HOME-}

demo=$(mktemp -d)
# bwrap resolves its binds as each sandbox's unprivileged uid: the dir above its root must be traversable.
chmod 711 "$demo"
export BERTH_HOME="$demo/home"
cleanup() {
  berth close --session alice >/dev/null 2>&1 || true
  berth close --session bob >/dev/null 2>&1 || true
  rm -rf "$demo"
}
trap cleanup EXIT

# Builds (or reuses) the image your next `berth exec` uses: the debian variant, built with debootstrap.
docker_config() {
  command -v debootstrap >/dev/null 2>&1 || bash scripts/apt-install.sh "to build the sandbox image $image" debootstrap
  (cd "$user_cwd" && BERTH_HOME=${user_berth_home} berth image build --image "$image")
  cat > "$demo/berth.yaml" <<YAML
backend: docker
persistent: false
docker:
  image: $image
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
  docker) docker info >/dev/null 2>&1 || bash scripts/ensure-docker.sh 3>/dev/null; docker_config ;;
  bwrap) bwrap_config ;;
  *) echo "demo: BERTH_DEMO_BACKEND must be docker or bwrap, not \"$backend\"" >&2; exit 2 ;;
esac
case $backend in
  docker) echo "demo: backend docker, image $image (the one your berth exec uses)" >&2 ;;
  *) echo "demo: backend $backend" >&2 ;;
esac
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

if [ "$backend" = docker ]; then
  printf '\ndemo: done. Next, from the quick start, a real command in %s:\n  node bin/berth.js exec --session s1 -- uname -a\n' "$image"
else
  printf '\ndemo: done. berth exec uses docker unless a berth.yaml says "backend: bwrap" (see the quick start)\n'
fi
