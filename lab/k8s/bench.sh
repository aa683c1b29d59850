#!/usr/bin/env bash
# Benchmark of the k8s method against the lab control plane (lab/k8s/up.sh), with the
# real provider binary driven by terraform (TF=/path/to/tofu for OpenTofu) and a real
# registry on 127.0.0.1 (lab/k8s/labregistry).
#
# Prints:
#   - the apply time of an unchanged re-apply;
#   - per fault (crashloop, broken = ImagePullBackOff with pull_grace 20s, unbound claim):
#     the time from the moment a pod of the new image first shows the unrecoverable state
#     (seen by an independent observer polling the apiserver every 0.2 s) to the moment
#     the apply fails (terraform exits), rollback included. Target: <= 30 s, where a plain
#     wait for the rollout would take the whole rollout_wait (here 5m).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
TF="${TF:-/usr/local/bin/terraform}"
KC="$(bash "$HERE/up.sh")"
STATE="$(dirname "$KC")"
PKI="$STATE/pki"
API="https://127.0.0.1:16443"
W="$(mktemp -d /tmp/fediversity-k8s-bench.XXXXXX)"
NS="bench-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"

cd "$ROOT"
go build -o "$W/bin/terraform-provider-fediversity" .
go build -o "$W/labregistry" ./lab/k8s/labregistry
"$W/labregistry" -listen 127.0.0.1:0 > "$W/registry.addr" 2>"$W/registry.log" &
REG_PID=$!
cleanup() {
  if [[ "$(readlink /proc/$REG_PID/exe 2>/dev/null || true)" == "$W/labregistry" ]]; then kill "$REG_PID"; fi
  curl -sS -o /dev/null --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -X DELETE "$API/api/v1/namespaces/$NS" || true
  rm -rf "$W"
}
trap cleanup EXIT
for _ in $(seq 1 50); do [[ -s $W/registry.addr ]] && break; sleep 0.1; done
REG="$(cat "$W/registry.addr")"
for a in good good2 bad; do "$W/labregistry" -write-archive "$W/$a.tar"; done

cat > "$W/cli.tfrc" <<RC
provider_installation {
  dev_overrides {
    "fediversity/fediversity" = "$W/bin"
    "registry.opentofu.org/fediversity/fediversity" = "$W/bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE="$W/cli.tfrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
export K8S_REGISTRY="$REG" K8S_NAMESPACE="$NS" KUBE_CONFIG_PATH="$KC"

cat > "$W/main.tf" <<'TFEOF'
terraform {
  required_providers {
    fediversity = { source = "fediversity/fediversity" }
  }
}
variable "image_node" { type = string }
variable "tag" { type = string }
variable "archive" { type = string }
variable "pull_grace" { default = "20s" }

resource "fediversity_k8s_namespace" "ns" {}

resource "fediversity_image" "node" {
  namespace = fediversity_k8s_namespace.ns.name
  node      = var.image_node
  tag       = var.tag
  archive   = var.archive
}

resource "fediversity_k8s_rollout" "web01" {
  namespace     = fediversity_k8s_namespace.ns.name
  node          = "web01"
  image_ref     = fediversity_image.node.image_ref
  storage_class = "fediversity-lab"
  timings {
    rollout_wait = "5m"
    pull_grace   = var.pull_grace
  }
}
TFEOF
cd "$W"
apply() { "$TF" apply -auto-approve -input=false -no-color -var "image_node=$1" -var "tag=$2" -var "archive=$W/$3.tar" >"$W/apply.log" 2>&1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

t0=$(now); apply web01 v1 good; t1=$(now)
echo "first apply (push + namespace + rollout): $(secs "$t0" "$t1") s"
t0=$(now); apply web01 v1 good; t1=$(now)
grep -q "0 added, 0 changed, 0 destroyed\|No changes" "$W/apply.log" || { echo "unchanged re-apply was not empty:"; cat "$W/apply.log"; exit 1; }
echo "unchanged re-apply: $(secs "$t0" "$t1") s"

# first_bad_state <image-substring> <pattern>: poll pods until one of the image shows the pattern.
observe() {
  local sub=$1 pat=$2
  for _ in $(seq 1 3000); do
    if curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$API/api/v1/namespaces/$NS/pods?labelSelector=fediversity.org/node%3Dweb01" 2>/dev/null | tr -d ' \n' |
        grep -q "$sub.*$pat\|$pat.*$sub"; then
      now; return
    fi
    sleep 0.2
  done
  echo never
}

for fault in crashloop:CrashLoopBackOff broken:ImagePullBackOff unbound:Unschedulable; do
  sub=${fault%%:*}; pat=${fault#*:}
  observe "web01-$sub" "\"reason\":\"$pat\"" > "$W/seen.$sub" &
  obs=$!
  t0=$(now)
  if apply "web01-$sub" v1 bad; then echo "$sub: the apply succeeded, which it must not"; exit 1; fi
  t1=$(now)
  wait "$obs" || true
  seen=$(cat "$W/seen.$sub")
  grep -q "set back to the previous image" "$W/apply.log" || { echo "$sub: no rollback in the output:"; tail -30 "$W/apply.log"; exit 1; }
  if [[ $seen == never ]]; then echo "$sub: the observer never saw $pat"; exit 1; fi
  echo "$sub: unrecoverable state seen -> apply failed (rolled back): $(secs "$seen" "$t1") s (whole failed apply $(secs "$t0" "$t1") s, rollout_wait 5m)"
  apply web01 v1 good   # back to good for the next fault
done
"$TF" destroy -auto-approve -input=false -no-color -var image_node=web01 -var tag=v1 -var "archive=$W/good.tar" >"$W/destroy.log" 2>&1 && echo "destroy ok"
