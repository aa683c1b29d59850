#!/usr/bin/env bash
# Start a real Kubernetes control plane on 127.0.0.1 for the k8s acceptance tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and kwok in the
# kubelet's place (no container runtime exists here; kwok sets pod status by the stages
# below). Follows /work/shared/K8S-LAB.md.
#
# Idempotent and fast when already up: when every saved PID is alive and /readyz
# answers, it prints the kubeconfig path and exits.
#
# Output (stdout): the kubeconfig path. State: /var/lib/fediversity-k8s (override with
# FEDIVERSITY_K8S_STATE). Stop with lab/k8s/down.sh.
#
# Custom kwok stages (a pod's fate is chosen by its image name):
#   image contains "broken"    -> Pending, container waiting ImagePullBackOff (+ event)
#   image contains "crashloop" -> Running, container waiting CrashLoopBackOff, restarts
#   image contains "unbound"   -> Pending, PodScheduled=False Unschedulable with the
#                                 scheduler's message for an unbound claim (the lab has no
#                                 volume provisioner and its scheduler skips VolumeBinding)
#   anything else              -> Running and Ready
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${FEDIVERSITY_K8S_STATE:-/var/lib/fediversity-k8s}"
PKI="$STATE/pki"; PIDS="$STATE/pids"; LOGS="$STATE/logs"
KUBECONFIG_OUT="$STATE/kubeconfig"
ETCD_PORT=23790; ETCD_PEER_PORT=23800; API_PORT=16443; KCM_PORT=10257; SCHED_PORT=10259
API="https://127.0.0.1:$API_PORT"

log() { echo "up.sh: $*" >&2; }

# Binaries (build.sh prints name=path; it does nothing when cached).
declare -A BIN
while IFS='=' read -r k v; do BIN[$k]=$v; done < <(bash "$HERE/build.sh")
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
  [[ -x ${BIN[$c]:-} ]] || { log "missing binary $c; run lab/k8s/build.sh"; exit 1; }
done

alive() { # name -> 0 when its saved PID runs the cached binary: a part rebuilt (a new
  # version, or the parts' version set moved) is not up, and starts clean below
  local f="$PIDS/$1.pid" pid exe
  [[ -f $f ]] || return 1
  pid=$(cat "$f"); exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  [[ -n $exe && $exe == "${BIN[$1]}" ]]
}

ready() {
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$API/readyz" >/dev/null 2>&1
}

# A control plane started by an older version of this script, without the flags it
# passes now, is not up: it starts clean below.
current_flags() {
  tr '\0' ' ' < "/proc/$(cat "$PIDS/kube-controller-manager.pid")/cmdline" 2>/dev/null | grep -q -- '--enable-hostpath-provisioner'
}

all_alive=1
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do alive "$c" || all_alive=0; done
[[ $all_alive == 1 ]] && ! current_flags && all_alive=0
if [[ $all_alive == 1 && -s $KUBECONFIG_OUT ]] && ready; then
  echo "$KUBECONFIG_OUT"; exit 0
fi
# Partly up: stop what is left and start clean.
bash "$HERE/down.sh" >&2 || true

command -v openssl >/dev/null || { log "openssl is needed"; exit 1; }
command -v curl >/dev/null || { log "curl is needed"; exit 1; }

start=$(date +%s%N)
mkdir -p "$PKI" "$PIDS" "$LOGS"
chmod 700 "$STATE" "$PKI"

# --- certificates (kept across restarts) ---
if [[ ! -f $PKI/admin.crt ]]; then
  log "making certificates"
  cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=fediversity-lab-ca" 2>/dev/null
  cat > apiserver.ext <<EXT
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EXT
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
  echo "extendedKeyUsage=clientAuth" > client.ext
  openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 -extfile client.ext 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  rm -f ./*.csr
  chmod 600 ./*.key
  cd - >/dev/null
fi

b64() { base64 -w0 < "$1"; }
umask 077
cat > "$KUBECONFIG_OUT" <<KC
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: $API
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(b64 "$PKI/admin.crt")
    client-key-data: $(b64 "$PKI/admin.key")
contexts:
- name: lab
  context: {cluster: lab, user: admin}
current-context: lab
KC

run() { # name args... : start in background, save PID
  local name=$1; shift
  # setsid: the control plane outlives the shell (and the CI step) that started it.
  HOME="$STATE/home-$name" setsid "${BIN[$name]}" "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$PIDS/$name.pid"
}
mkdir -p "$STATE"/home-{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kwok}

# --- etcd: fresh data each start, no fsync (throwaway data) ---
rm -rf "$STATE/etcd-data"
run etcd --name lab --data-dir "$STATE/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn

# kube-apiserver gives up and exits 20 s after its start when etcd does not answer
# ("error creating storage factory: context deadline exceeded"), so it starts only once
# etcd is healthy. On a loaded machine (a CI run starts this beside the lab's instances
# booting and the test builds) etcd took longer than the 10 s this loop once allowed,
# and the apiserver started beside it exited: a whole run lost its Kubernetes suites.
for i in $(seq 1 600); do
  curl -fsS --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break
  # Only whether its PID lives: in the first moments it may not have exec'd etcd yet.
  kill -0 "$(cat "$PIDS/etcd.pid")" 2>/dev/null || { log "etcd exited; see $LOGS/etcd.log"; tail -20 "$LOGS/etcd.log" >&2; exit 1; }
  [[ $i == 600 ]] && { log "etcd not healthy after 120s; see $LOGS/etcd.log"; tail -20 "$LOGS/etcd.log" >&2; exit 1; }
  sleep 0.2
done

run kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$PKI/sa.pub" \
  --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --authorization-mode RBAC \
  --endpoint-reconciler-type none --enable-priority-and-fairness=false

for i in $(seq 1 900); do
  ready && break
  alive kube-apiserver || { log "kube-apiserver exited; see $LOGS/kube-apiserver.log"; grep -E '^[EF][0-9]{4} ' "$LOGS/kube-apiserver.log" | tail -5 >&2; tail -10 "$LOGS/kube-apiserver.log" >&2; exit 1; }
  [[ $i == 900 ]] && { log "kube-apiserver not ready after 180s"; exit 1; }
  sleep 0.2
done

# --enable-hostpath-provisioner: the one volume provisioner served here, Kubernetes' own
# in-tree one for a single-host cluster (a directory under /tmp/hostpath_pv of this host,
# removed with its claim). The real node's StorageClass "fediversity-real-provisioned"
# names it (node-up.sh); kwok's node has no volumes at all.
run kube-controller-manager --kubeconfig "$KUBECONFIG_OUT" --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
  --leader-elect=false --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --use-service-account-credentials=false --enable-hostpath-provisioner

cat > "$STATE/scheduler.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_OUT
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      disabled:
      - name: VolumeBinding
      - name: VolumeZone
YAML
run kube-scheduler --config "$STATE/scheduler.yaml" --bind-address 127.0.0.1 --secure-port "$SCHED_PORT"

cp "$HERE/stages.yaml" "$STATE/stages.yaml"
run kwok --kubeconfig "$KUBECONFIG_OUT" --config "$STATE/stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds=40 --cidr=10.244.0.0/16 --node-ip=10.0.0.1

# --- cluster objects: the fake node, RuntimeClasses, a StorageClass ---
api_apply() { # path json: create, ignore AlreadyExists
  local code
  code=$(curl -sS -o "$LOGS/last-apply.json" -w '%{http_code}' --max-time 10 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    -H 'Content-Type: application/json' -X POST "$API$1" -d "$2")
  [[ $code == 201 || $code == 409 ]] || { log "POST $1 -> $code: $(cat "$LOGS/last-apply.json")"; exit 1; }
}
api_apply /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"kwok-node-0","annotations":{"kwok.x-k8s.io/node":"fake","node.alpha.kubernetes.io/ttl":"0"},"labels":{"type":"kwok","kubernetes.io/hostname":"kwok-node-0","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64"}},"status":{"allocatable":{"cpu":"32","memory":"256Gi","pods":"110"},"capacity":{"cpu":"32","memory":"256Gi","pods":"110"}}}'
for rc in ${FEDIVERSITY_K8S_RUNTIME_CLASSES:-fediversity}; do
  api_apply /apis/node.k8s.io/v1/runtimeclasses "{\"apiVersion\":\"node.k8s.io/v1\",\"kind\":\"RuntimeClass\",\"metadata\":{\"name\":\"$rc\"},\"handler\":\"$rc\"}"
done
# A StorageClass whose provisioner does not exist: claims stay Pending (the lab has no
# volumes), and the PV controller says so with Normal events, not Warnings.
api_apply /apis/storage.k8s.io/v1/storageclasses '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"fediversity-lab"},"provisioner":"lab.fediversity.org/none","volumeBindingMode":"Immediate"}'

# Ready when the fake node is Ready (kwok's node-initialize stage ran).
for i in $(seq 1 150); do
  if curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$API/api/v1/nodes/kwok-node-0" 2>/dev/null |
     tr -d ' \n' | grep '"type":"Ready","status":"True"\|"status":"True","type":"Ready"\|"reason":"KubeletReady"' >/dev/null; then
    break
  fi
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    alive "$c" || { log "$c exited; see $LOGS/$c.log"; tail -20 "$LOGS/$c.log" >&2; exit 1; }
  done
  [[ $i == 150 ]] && { log "fake node not Ready after 30s; see $LOGS/kwok.log"; exit 1; }
  sleep 0.2
done
log "control plane up in $(( ($(date +%s%N) - start) / 1000000 )) ms"
echo "$KUBECONFIG_OUT"
