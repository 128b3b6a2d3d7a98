#!/usr/bin/env bash
# Rehearse a deployment on one machine: a SuperLink and N SuperNodes on 127.0.0.1 with TLS (certificates from
# credentials.py) and SuperNode authentication (each node's key registered with `flwr supernode register`),
# each node holding its own clients (node k: the clients i with i mod N = k, its private state in its own
# folder), then `flwr run` of this app; every process it starts is stopped when it ends. Usage (from the
# repository root):
#   deploy/flower/loopback.sh [N=2] [CLIENTS=4]        # CLIENTS: num_clients of the app's config
#   INSECURE=1 deploy/flower/loopback.sh ...            # without TLS and authentication
#   RUN_CONFIG="config='{...}'" deploy/flower/loopback.sh 10 10   # another experiment (flwr run --run-config)
# Across machines, run the same commands on the machines named in the book's page "fedlib on Flower".
set -euo pipefail
NODES=${1:-2}
CLIENTS=${2:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
VENV_BIN=$(cd "$HERE/../.." && pwd)/.venv/bin
export PATH="$VENV_BIN:$PATH" FLWR_DISABLE_UPDATE_CHECK=1
export FLWR_HOME=$(mktemp -d)            # Flower's state, the credentials and the SuperLink connection
LOGS="$FLWR_HOME/logs"; CREDS="$FLWR_HOME/credentials"; mkdir -p "$LOGS"
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
cd "$FLWR_HOME"                          # the ServerApp writes its record here

if [[ "${INSECURE:-0}" == 1 ]]; then
  LINK_TLS=(--insecure); NODE_TLS=(--insecure); CLI_TLS="insecure = true"
else
  python "$HERE/credentials.py" "$CREDS" --nodes "$NODES" > /dev/null
  LINK_TLS=(--ssl-ca-certfile "$CREDS/ca.crt" --ssl-certfile "$CREDS/server.pem" --ssl-keyfile "$CREDS/server.key"
            --enable-supernode-auth)
  NODE_TLS=(--root-certificates "$CREDS/ca.crt")
  CLI_TLS="root-certificates = \"$CREDS/ca.crt\""
fi
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "loopback"

[superlink.loopback]
address = "127.0.0.1:8000"
$CLI_TLS
TOML

flower-superlink "${LINK_TLS[@]}" > "$LOGS/superlink.log" 2>&1 & PIDS+=($!)
sleep 5
for ((k = 0; k < NODES; k++)); do
  held=$(seq -s, "$k" "$NODES" $((CLIENTS - 1)))
  auth=()
  if [[ "${INSECURE:-0}" != 1 ]]; then
    flwr supernode register "$CREDS/node$k.pub" loopback > "$LOGS/register$k.log" 2>&1
    auth=(--auth-supernode-private-key "$CREDS/node$k")
  fi
  flower-supernode "${NODE_TLS[@]}" "${auth[@]}" --superlink 127.0.0.1:8000 --port $((9094 + k)) \
    --node-config "clients='$held' state-dir='$FLWR_HOME/node$k'" > "$LOGS/supernode$k.log" 2>&1 & PIDS+=($!)
done
sleep 5
flwr run "$HERE" loopback --stream ${RUN_CONFIG:+--run-config "$RUN_CONFIG"}
if [[ -f fedlib-flower-record.json ]]; then echo "record: $FLWR_HOME/fedlib-flower-record.json (logs in $LOGS)"; else echo "no record written (logs in $LOGS)"; exit 1; fi
