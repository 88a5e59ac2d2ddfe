#!/usr/bin/env bash
# berth's main job, end to end on a real Docker engine: two conversations get their own
# sandboxes, a later process reattaches to the first with its cwd and files, and closing the
# sessions removes their containers.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

bash scripts/ensure-docker.sh 3>/dev/null
[ -d node_modules ] || npm ci
[ -f dist/cli/main.js ] || npm run build
node bin/berth.js image build --variant minimal

demo=$(mktemp -d)
export BERTH_HOME="$demo/home"
berth() { node "$repo/bin/berth.js" "$@"; }
cleanup() {
  berth close --session alice >/dev/null 2>&1 || true
  berth close --session bob >/dev/null 2>&1 || true
  rm -rf "$demo"
}
trap cleanup EXIT
cat > "$demo/berth.yaml" <<'YAML'
backend: docker
persistent: false
docker:
  image: berth-sandbox:minimal
YAML
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
