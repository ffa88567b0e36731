#!/usr/bin/env bash
# Soak test of cordon (scripts/soak.py): many one-shot runs and sandbox lifecycles with hostile
# payloads mixed in, through the CLI, HTTP, MCP and the E2B SDK, the server's and the host's
# resources sampled, a report written. `scripts/soak.sh --help` explains; `--short` is CI's form.
# Needs a Python with e2b, e2b_code_interpreter, cordon_sdk and mcp: $SOAK_PYTHON, else the
# venv scripts/test.sh makes ($venv/bin/python), else python3. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${SOAK_PYTHON:-python3}
exec "$py" scripts/soak.py "$@"
