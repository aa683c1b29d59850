#!/usr/bin/env bash
# Start the lab's real Kubernetes node on 127.0.0.1 beside kwok's fake one: containerd
# (CRI, overlayfs, CNI bridge), the "fediversity" runtime handler (fediversity-runtime
# around runc, see its source for what it gives a pod) and a kubelet, registered against
# the control plane of up.sh. Follows /work/shared/K8S-LAB.md ("A real kubelet").
#
# The node keeps to its own pods and they to it: it is registered with the taint and the
# label fediversity.org/real-node, and the RuntimeClass "fediversity-real" (handler
# "fediversity") carries the matching nodeSelector and toleration in its `scheduling`. A
# pod of any other class never lands here; a pod of this class never lands on kwok's node.
# The StorageClass "fediversity-real" has no provisioner: a test makes a static hostPath
# PV under $STATE/volumes for its claim, so a replaced pod finds the old one's files.
# The StorageClass "fediversity-real-provisioned" has one: kube-controller-manager's
# in-tree hostPath provisioner (up.sh), which makes a volume for each new claim.
#
# The node's pods have a scheduler of their own, with every default plugin: the control
# plane's (up.sh) skips VolumeBinding, since kwok's claims never bind, and so would place
# a pod whose claim has no volume, leaving the kubelet to wait minutes for its mount. A
# real cluster's scheduler refuses that pod at once ("pod has unbound immediate
# PersistentVolumeClaims"), and so does this one. The admission policy
# "fediversity-real-scheduler" hands it every pod of the RuntimeClass "fediversity-real"
# by setting its schedulerName (the pod spec's only change; the Deployment's template
# stays the provider's).
#
# Idempotent and fast when already up. Output (stdout): the node's name. State:
# /var/lib/fediversity-k8s-node (FEDIVERSITY_K8S_NODE_STATE). Stop with node-down.sh.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${FEDIVERSITY_K8S_NODE_STATE:-/var/lib/fediversity-k8s-node}"
CP_STATE="${FEDIVERSITY_K8S_STATE:-/var/lib/fediversity-k8s}"
KUBECONFIG_CP="$CP_STATE/kubeconfig"
NODE="${FEDIVERSITY_K8S_NODE_NAME:-fediversity-real-0}"
KUBELET_PORT=10250; KUBELET_HEALTHZ=10248
SCHED_PORT=10261; SCHEDULER_NAME=fediversity-real; RUNTIME_CLASS=fediversity-real
PIDS="$STATE/pids"; LOGS="$STATE/logs"; RUN="$STATE/run"
SOCK="$RUN/containerd/containerd.sock"
PAUSE_IMAGE="fediversity.local/pause:1"
# A subnet of its own, on its own bridge: pods reach only each other and this host.
POD_SUBNET=10.244.77.0/24; BRIDGE=fedik8s0
MAX_PODS=20; USERNS_FIRST=$((1 << 31)); USERNS_LEN=$((MAX_PODS * 65536))

API="https://127.0.0.1:16443"; PKI="$CP_STATE/pki"
log() { echo "node-up.sh: $*" >&2; }
api() { # method path [curl args...]
  local method=$1 path=$2; shift 2
  curl -sS --max-time 10 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    -X "$method" "$API$path" "$@"
}
api_apply() { # path json: create, ignore AlreadyExists
  local code
  code=$(api POST "$1" -H 'Content-Type: application/json' -d "$2" -o "$LOGS/last-apply.json" -w '%{http_code}' || true)
  [[ $code == 201 || $code == 409 ]] || { log "POST $1 -> $code: $(cat "$LOGS/last-apply.json")"; exit 1; }
}

# Binaries (the build scripts print name=path; they do nothing when cached).
declare -A BIN
while IFS='=' read -r k v; do BIN[$k]=$v; done < <(bash "$HERE/build.sh"; bash "$HERE/node-build.sh")
for c in containerd containerd-shim-runc-v2 ctr runc kubelet kube-scheduler fediversity-runtime pause; do
  [[ -x ${BIN[$c]:-} ]] || { log "missing binary $c; run lab/k8s/build.sh and lab/k8s/node-build.sh"; exit 1; }
done

alive() { # name -> 0 when its saved PID runs the cached binary: a part rebuilt (a new
  # version, or the parts' version set moved) is not up, and starts clean below
  local f="$PIDS/$1.pid" pid exe
  [[ -f $f ]] || return 1
  pid=$(cat "$f"); exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  [[ -n $exe && $exe == "${BIN[$1]}" ]]
}

# In the wait loops: the process may not have exec'd its binary yet, so only ask
# whether its PID lives.
running() { kill -0 "$(cat "$PIDS/$1.pid" 2>/dev/null)" 2>/dev/null; }

node_ready() {
  api GET "/api/v1/nodes/$NODE" 2>/dev/null | tr -d ' \n' | grep '"type":"Ready","status":"True"' >/dev/null
}

[[ -s $KUBECONFIG_CP ]] || { log "no control plane: run lab/k8s/up.sh first"; exit 1; }
command -v curl >/dev/null || { log "curl is needed"; exit 1; }
# The pod bridge and the host's address in it exist from the start, not only from the
# first pod on (the CNI bridge plugin takes the bridge as it finds it): a test can then
# open a lab service to the pods, listening on that address, before any pod ran (the
# SPIRE agent test, internal/provider/k8s/resource_k8s_rollout_realnode_spire_test.go).
ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
ip -4 addr show dev "$BRIDGE" | grep -F " ${POD_SUBNET%.*/*}.1/24 " >/dev/null || ip addr add "${POD_SUBNET%.*/*}.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
run() { # name binary args... : start in background, save PID
  local name=$1; shift
  # setsid: the node outlives the shell (and the CI step) that started it.
  HOME="$STATE/home" PATH="$STATE/bin:$PATH" setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$PIDS/$name.pid"
}

# node_objects_up: the cluster objects of the real node, its own scheduler and the
# admission policy that gives it the node's pods (see the top). Idempotent, and apart
# from the kubelet: a node already up gets what is missing without a restart.
node_objects_up() {
  api_apply /apis/node.k8s.io/v1/runtimeclasses '{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"fediversity-real"},"handler":"fediversity","scheduling":{"nodeSelector":{"fediversity.org/real-node":"true"},"tolerations":[{"key":"fediversity.org/real-node","operator":"Exists","effect":"NoSchedule"}]}}'
  api_apply /apis/storage.k8s.io/v1/storageclasses '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"fediversity-real"},"provisioner":"kubernetes.io/no-provisioner","volumeBindingMode":"Immediate"}'
  api_apply /apis/storage.k8s.io/v1/storageclasses '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"fediversity-real-provisioned"},"provisioner":"kubernetes.io/host-path","reclaimPolicy":"Delete","volumeBindingMode":"Immediate"}'
  mkdir -p "$PIDS" "$LOGS" "$STATE/home"
  if ! alive kube-scheduler; then
    local bin=${BIN[kube-scheduler]}
    cat > "$STATE/scheduler.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_CP
leaderElection:
  leaderElect: false
profiles:
- schedulerName: $SCHEDULER_NAME
YAML
    run kube-scheduler "$bin" --config "$STATE/scheduler.yaml" --bind-address 127.0.0.1 --secure-port "$SCHED_PORT"
    for i in $(seq 1 300); do
      curl -ksS --max-time 1 "https://127.0.0.1:$SCHED_PORT/healthz" 2>/dev/null | grep -qx ok && break
      running kube-scheduler || { log "kube-scheduler exited; see $LOGS/kube-scheduler.log"; tail -20 "$LOGS/kube-scheduler.log" >&2; exit 1; }
      [[ $i == 300 ]] && { log "kube-scheduler not healthy after 60s; see $LOGS/kube-scheduler.log"; exit 1; }
      sleep 0.2
    done
  fi
  api_apply /apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies "$(cat <<JSON
{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
 "metadata": {"name": "fediversity-real-scheduler"},
 "spec": {
   "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
   "matchConditions": [{"name": "real-node-runtime-class",
     "expression": "has(object.spec.runtimeClassName) && object.spec.runtimeClassName == '$RUNTIME_CLASS'"}],
   "failurePolicy": "Fail", "reinvocationPolicy": "Never",
   "mutations": [{"patchType": "ApplyConfiguration",
     "applyConfiguration": {"expression": "Object{spec: Object.spec{schedulerName: \"$SCHEDULER_NAME\"}}"}}]}}
JSON
)"
  api_apply /apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings '{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicyBinding","metadata":{"name":"fediversity-real-scheduler"},"spec":{"policyName":"fediversity-real-scheduler"}}'
}

if alive containerd && alive kubelet && node_ready; then node_objects_up; echo "$NODE"; exit 0; fi
bash "$HERE/node-down.sh" >&2 || true

# The node image's base layer: the lab's Debian root (debootstrap, real systemd as
# /sbin/init; not the NixOS-shaped lab image, whose stage 2 runs a system of its own),
# gzipped once per root. Tests stack a small layer per variant on it. lab/lab.sh up
# writes the root's path into the lab's state (the path names the root's version and
# package set, so it is read, not worked out here).
lab_state=${LAB_STATE:-/var/lib/fediversity-lab}
LAB_ROOTFS=$(cat "$lab_state/rootfs" 2>/dev/null) || { log "the lab is not up ($lab_state/rootfs missing): run lab/lab.sh up first"; exit 1; }
root_id=$(basename "$(dirname "$LAB_ROOTFS")")
NODE_LAYER="${FEDIVERSITY_K8S_CACHE:-${FEDIVERSITY_CACHE:-/var/cache/fediversity}}/node-image-$root_id/rootfs.tar.gz"
if [[ ! -s $NODE_LAYER ]]; then
  [[ -s $LAB_ROOTFS ]] || { log "no lab root at $LAB_ROOTFS: run lab/lab.sh up"; exit 1; }
  log "gzipping the lab rootfs into the node image's base layer"
  mkdir -p "$(dirname "$NODE_LAYER")"
  gzip -1 -c "$LAB_ROOTFS" > "$NODE_LAYER.tmp" && mv "$NODE_LAYER.tmp" "$NODE_LAYER"
fi

start=$(date +%s%N)
mkdir -p "$PIDS" "$LOGS" "$RUN" "$STATE/bin" "$STATE/cni/net.d" "$STATE/volumes" "$STATE/home"
# 711: the pods' mapped root must be able to walk to their bundles and rootfs.
chmod 711 "$STATE"
ln -sfn "$NODE_LAYER" "$STATE/node-layer.tar.gz"

# Every systemd (in Incus containers and in pods) takes inotify instances that count
# against host root; 128 is far too few for a lab of them.
for kv in fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=1048576; do
  k=${kv%=*}; v=${kv#*=}
  (( $(sysctl -n "$k") >= v )) || sysctl -qw "$kv"
done

# The pods' user namespaces: the kubelet takes host IDs from the subordinate range of a
# user named "kubelet" (read with getsubids), else from anywhere in 65536..2^32, which
# would overlap Incus' range (root:1000000:1000000000 here). Give it its own range above
# 2^31: 65536 IDs per pod, maxPods of them.
command -v getsubids >/dev/null || { log "getsubids (package uidmap) is needed"; exit 1; }
id kubelet >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kubelet
for f in /etc/subuid /etc/subgid; do
  grep -q '^kubelet:' "$f" 2>/dev/null || echo "kubelet:$USERNS_FIRST:$USERNS_LEN" >> "$f"
done

# The shim runs "runc" and the handler's binary by these paths; fediversity-runtime finds
# runc next to itself.
for c in runc fediversity-runtime containerd-shim-runc-v2 ctr; do ln -sfn "${BIN[$c]}" "$STATE/bin/$c"; done

cat > "$STATE/containerd.toml" <<TOML
version = 4
root = '$STATE/containerd'
state = '$RUN/containerd'
imports = []

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '$SOCK'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '$SOCK.ttrpc'

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$PAUSE_IMAGE'

  [plugins.'io.containerd.cri.v1.runtime']
    # Root lacks CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj below its own.
    restrict_oom_score_adj = true
    disable_apparmor = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '$STATE/bin/runc'
          SystemdCgroup = false
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.fediversity]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.fediversity.options]
          BinaryName = '$STATE/bin/fediversity-runtime'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['${BIN[cni]}']
      conf_dir = '$STATE/cni/net.d'

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
TOML

cat > "$STATE/cni/net.d/10-fediversity.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "fediversity-lab",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "dataDir": "$STATE/cni/ipam"}},
    {"type": "loopback"}
  ]
}
JSON

rm -f "$SOCK" "$SOCK.ttrpc" # a stale socket would look like a containerd that answers
run containerd "${BIN[containerd]}" --config "$STATE/containerd.toml"
for i in $(seq 1 300); do
  [[ -S $SOCK ]] && "${BIN[ctr]}" --address "$SOCK" version >/dev/null 2>&1 && break
  running containerd || { log "containerd exited; see $LOGS/containerd.log"; tail -20 "$LOGS/containerd.log" >&2; exit 1; }
  [[ $i == 300 ]] && { log "containerd not answering after 60s"; exit 1; }
  sleep 0.2
done

# The sandbox image: no registry is reachable, so it is made here from the static pause
# binary as a docker archive and imported.
if ! "${BIN[ctr]}" --address "$SOCK" -n k8s.io images check "name==$PAUSE_IMAGE" 2>/dev/null | grep "$PAUSE_IMAGE" >/dev/null; then
  w=$(mktemp -d)
  mkdir -p "$w/root"; cp "${BIN[pause]}" "$w/root/pause"
  tar -C "$w/root" --owner=0 --group=0 --numeric-owner -cf "$w/layer.tar" pause
  diff_id=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  mkdir -p "$w/img/$diff_id"; mv "$w/layer.tar" "$w/img/$diff_id/layer.tar"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff_id" > "$w/config.json"
  cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1); mv "$w/config.json" "$w/img/$cfg.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$PAUSE_IMAGE" "$diff_id" > "$w/img/manifest.json"
  tar -C "$w/img" -cf "$w/pause.tar" .
  "${BIN[ctr]}" --address "$SOCK" -n k8s.io images import --no-unpack=false "$w/pause.tar" >&2
  "${BIN[ctr]}" --address "$SOCK" -n k8s.io images label "$PAUSE_IMAGE" io.cri-containerd.pinned=pinned >/dev/null
  rm -rf "$w"
fi

cat > "$STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# The lab apiserver dials the kubelet without a client certificate (it has no
# --kubelet-client-certificate): exec and logs need anonymous access, on 127.0.0.1 only.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
registerWithTaints:
- {key: fediversity.org/real-node, value: "true", effect: NoSchedule}
# A shared machine's disk fills with other work: never evict or collect images for it.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: $MAX_PODS
resolvConf: /etc/resolv.conf
YAML

run kubelet "${BIN[kubelet]}" --config "$STATE/kubelet.yaml" --kubeconfig "$KUBECONFIG_CP" \
  --root-dir "$STATE/kubelet" --hostname-override "$NODE" --node-ip 127.0.0.1 \
  --node-labels "fediversity.org/real-node=true"

for i in $(seq 1 900); do
  node_ready && break
  for c in containerd kubelet; do
    running "$c" || { log "$c exited; see $LOGS/$c.log"; tail -30 "$LOGS/$c.log" >&2; exit 1; }
  done
  [[ $i == 900 ]] && { log "node $NODE not Ready after 180s; see $LOGS/kubelet.log"; tail -30 "$LOGS/kubelet.log" >&2; exit 1; }
  sleep 0.2
done

# The kubelet refuses a loopback node IP ("nodeIP can't be loopback address") and then
# reports no address at all, so the apiserver could not reach it for exec and logs. It
# keeps an address written into the Node's status, since its own address setter fails.
api PATCH "/api/v1/nodes/$NODE/status" -H 'Content-Type: application/merge-patch+json' \
  -d '{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"}]}}' -o /dev/null

node_objects_up
log "node $NODE Ready in $(( ($(date +%s%N) - start) / 1000000 )) ms"
echo "$NODE"
