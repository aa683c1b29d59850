#!/usr/bin/env bash
# The lab's spire node: a lab container "<prefix>-spire" that runs a real spire-server
# (SPIRE v1.13.3, trust domain "fediversity", sqlite datastore, disk key manager, node
# attestors join_token and k8s_psat). It is reached like any node: over SSH through a
# loopback proxy device. Two more proxy devices:
#   - the SPIRE server port, on the host's loopback, for agents beside the lab and in
#     lab nodes (each test adds a device of its own node that points here);
#   - the lab kube-apiserver (host 127.0.0.1:16443) inside the container (bind=instance),
#     so the k8s_psat attestor reaches it for TokenReview at the address the
#     kubeconfig names.
# The k8s_psat attestor reads its clusters from a plugin_data_file that the provider's
# hand-off writes; spire-server reloads it on SIGUSR1.
#
# Idempotent: with the node up and the server healthy it only rewrites the state file.
# Needs the lab (bash lab/lab.sh up) for incusd and the image.
# Environment as lab/lab.sh: LAB_PREFIX, LAB_PORT_BASE, LAB_STATE.
# Ports: SSH on 127.0.0.1:$((LAB_PORT_BASE+90)), SPIRE server on 127.0.0.1:$((LAB_PORT_BASE+91)).
# Output: $LAB_STATE/spire.json (how to reach it) and $LAB_STATE/spire_known_hosts.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_PREFIX=${LAB_PREFIX:-fedi}
LAB_PORT_BASE=${LAB_PORT_BASE:-2200}
STATE=${LAB_STATE:-/var/lib/fediversity-lab}
NAME=$LAB_PREFIX-spire
SSH_PORT=$((LAB_PORT_BASE + 90))
SERVER_PORT=$((LAB_PORT_BASE + 91))
API_PORT=16443
IMAGE_ALIAS=$(bash "$HERE/../lab.sh" alias) # the lab image (lab/lab.sh)

log() { printf '[spire %s] %s\n' "$(date +%T)" "$*" >&2; }

[ -f "$STATE/id_ed25519.pub" ] || { log "the lab is not up ($STATE/id_ed25519.pub missing): run lab/lab.sh up first"; exit 1; }

declare -A BIN
while IFS='=' read -r k v; do BIN[$k]=$v; done < <(bash "$HERE/build.sh")
for c in spire-server spire-agent; do
  [[ -x ${BIN[$c]:-} ]] || { log "missing $c; run lab/spire/build.sh"; exit 1; }
done

healthy() { incus exec "$NAME" -- spire-server healthcheck >/dev/null 2>&1; }

if ! incus info "$NAME" >/dev/null 2>&1; then
  log "launching $NAME (ssh on 127.0.0.1:$SSH_PORT, spire-server on 127.0.0.1:$SERVER_PORT)"
  incus launch "$IMAGE_ALIAS" "$NAME" >/dev/null
elif ! incus info "$NAME" | grep '^Status: RUNNING' >/dev/null; then
  incus start "$NAME"
fi
dev() { # name spec…
  incus config device show "$NAME" | grep "^$1:" >/dev/null || incus config device add "$NAME" "$@" >/dev/null
}
dev ssh proxy "listen=tcp:127.0.0.1:$SSH_PORT" connect=tcp:127.0.0.1:22 bind=host
dev spire proxy "listen=tcp:127.0.0.1:$SERVER_PORT" connect=tcp:127.0.0.1:8081 bind=host
dev kubeapi proxy "listen=tcp:127.0.0.1:$API_PORT" "connect=tcp:127.0.0.1:$API_PORT" bind=instance

for _ in $(seq 1 60); do
  case "$(incus exec "$NAME" -- systemctl is-system-running 2>/dev/null || true)" in running | degraded) break ;; esac
  sleep 1
done
incus file push --mode 0600 "$STATE/id_ed25519.pub" "$NAME/root/.ssh/authorized_keys" >/dev/null
incus exec "$NAME" -- sh -c "$(cat "$HERE/../host-key-whole.sh"); systemctl restart ssh; echo $NAME >/etc/hostname; hostname $NAME"

# The binaries: pushed only when they differ from the cached build.
want=$(sha256sum "${BIN[spire-server]}" | cut -c1-64)
have=$(incus exec "$NAME" -- sh -c 'sha256sum /usr/local/bin/spire-server 2>/dev/null | cut -c1-64' || true)
if [ "$want" != "$have" ]; then
  log "pushing spire-server and spire-agent into $NAME"
  incus file push --mode 0755 "${BIN[spire-server]}" "$NAME/usr/local/bin/spire-server" >/dev/null
  incus file push --mode 0755 "${BIN[spire-agent]}" "$NAME/usr/local/bin/spire-agent" >/dev/null
  incus exec "$NAME" -- systemctl try-restart spire-server.service 2>/dev/null || true
fi
# The node is shaped like NixOS: a login's PATH (SSH, as the provider and the tests reach
# the server's CLI) has no /usr/local/bin. The commands go where a NixOS root's
# `nix-env -i` puts them, the default profile, which is on that PATH.
incus exec "$NAME" -- /bin/sh -c 'mkdir -p /nix/var/nix/profiles/default/bin &&
  for c in spire-server spire-agent; do ln -sfn /usr/local/bin/$c /nix/var/nix/profiles/default/bin/$c; done'

incus exec "$NAME" -- sh -c '
set -e
# The minbase lab image has no /etc/hosts; a real spire node resolves localhost.
test -f /etc/hosts || printf "127.0.0.1 localhost\n" >/etc/hosts
mkdir -p /etc/spire/server /var/lib/spire/server /var/lib/spire/fediversity/k8s
chmod 700 /var/lib/spire /var/lib/spire/server /var/lib/spire/fediversity
# The k8s_psat clusters: written by the provider (one per hand-off namespace); none at first.
test -f /var/lib/spire/fediversity/k8s_psat.hcl || echo "clusters = {}" >/var/lib/spire/fediversity/k8s_psat.hcl
cat >/etc/spire/server/server.conf <<CONF
server {
  bind_address = "127.0.0.1"
  bind_port = "8081"
  trust_domain = "fediversity"
  data_dir = "/var/lib/spire/server"
  log_level = "INFO"
  ca_ttl = "24h"
  default_x509_svid_ttl = "1h"
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = "/var/lib/spire/server/datastore.sqlite3"
    }
  }
  KeyManager "disk" {
    plugin_data { keys_path = "/var/lib/spire/server/keys.json" }
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
  NodeAttestor "k8s_psat" {
    plugin_data_file = "/var/lib/spire/fediversity/k8s_psat.hcl"
  }
}
CONF
cat >/etc/systemd/system/spire-server.service <<UNIT
[Unit]
Description=SPIRE server (fediversity lab)
After=network.target
[Service]
ExecStart=/usr/local/bin/spire-server run -config /etc/spire/server/server.conf
Restart=on-failure
[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now spire-server.service >/dev/null 2>&1
'
for _ in $(seq 1 120); do healthy && break; sleep 1; done
healthy || { log "spire-server is not healthy:"; incus exec "$NAME" -- journalctl -u spire-server --no-pager -n 30 >&2; exit 1; }

key=$(incus exec "$NAME" -- cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1" "$2}')
printf '[127.0.0.1]:%d %s\n' "$SSH_PORT" "$key" >"$STATE/spire_known_hosts"
printf '{"name":"%s","ssh_host":"127.0.0.1","ssh_port":%d,"host_key":"%s","server_port":%d,"trust_domain":"fediversity","api_server":"https://127.0.0.1:%d"}\n' \
  "$NAME" "$SSH_PORT" "$key" "$SERVER_PORT" "$API_PORT" >"$STATE/spire.json"
log "$NAME up: ssh -i $STATE/id_ed25519 -o UserKnownHostsFile=$STATE/spire_known_hosts -p $SSH_PORT root@127.0.0.1"
