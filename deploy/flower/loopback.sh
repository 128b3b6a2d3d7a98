#!/usr/bin/env bash
# Rehearse a deployment on one machine: a SuperLink and N SuperNodes on 127.0.0.1, then `flwr run` of
# this app; every process it starts is stopped when it ends. Usage (from the repository root):
#   deploy/flower/loopback.sh [N=2]
# Across machines, run the same three commands on the machines named in the book's page "fedlib on Flower".
set -euo pipefail
NODES=${1:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
VENV_BIN=$(cd "$HERE/../.." && pwd)/.venv/bin
export PATH="$VENV_BIN:$PATH" FLWR_DISABLE_UPDATE_CHECK=1
export FLWR_HOME=$(mktemp -d)            # Flower's state and the SuperLink connection of this rehearsal
LOGS="$FLWR_HOME/logs"; mkdir -p "$LOGS"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "loopback"

[superlink.loopback]
address = "127.0.0.1:8000"
insecure = true
TOML
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

cd "$FLWR_HOME"                          # the ServerApp writes its record here
flower-superlink --insecure > "$LOGS/superlink.log" 2>&1 & PIDS+=($!)
sleep 5
for ((i = 0; i < NODES; i++)); do
  flower-supernode --insecure --superlink 127.0.0.1:8000 --port $((9094 + i)) > "$LOGS/supernode$i.log" 2>&1 & PIDS+=($!)
done
sleep 5
flwr run "$HERE" loopback --stream
echo "record: $FLWR_HOME/fedlib-flower-record.json (logs in $LOGS)"
