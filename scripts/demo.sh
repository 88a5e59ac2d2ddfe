#!/usr/bin/env bash
# berth's main job, end to end on a real Docker engine: two conversations get their own
# sandboxes, a third call joins the first again, and closing removes what was ephemeral.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/ensure-docker.sh 3>/dev/null
[ -d node_modules ] || npm ci
[ -f dist/cli/main.js ] || npm run build
node bin/berth.js image build --variant minimal

demo=$(mktemp -d)
trap 'node bin/berth.js close --session alice >/dev/null 2>&1 || true; node bin/berth.js close --session bob >/dev/null 2>&1 || true; rm -rf "$demo"' EXIT
export BERTH_HOME="$demo/home"
cat > "$demo/berth.yaml" <<'YAML'
backend: docker
persistent: false
docker:
  image: berth-sandbox:minimal
YAML
cd "$demo"
berth() { node "$OLDPWD/bin/berth.js" "$@"; }

set -x
berth explain --session alice
berth exec --session alice -- 'echo "alice was here" > notes.txt; cd /tmp; hostname'
berth exec --session bob -- 'ls /workspace; cat /workspace/notes.txt || echo "bob cannot see alice'"'"'s notes"; hostname'
berth exec --session alice -- 'pwd; cat /workspace/notes.txt'
berth ls
berth close --session alice
berth close --session bob
berth ls
