terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}

# Every provider attribute is a per-run value: it is read on each run, never stored in
# state or in a node plan, and changing it causes no diff. Unset attributes fall back to
# their environment variables (SSH_PRIVATE_KEY_FILE, SSH_AUTH_SOCK, KUBE_CONFIG_PATH,
# K8S_REGISTRY, K8S_NAMESPACE, REGISTRY_AUTH_FILE, INCUS_SOCKET), which is the usual way
# to give credentials: they then stay out of the configuration too.
provider "fediversity" {
  # ssh_private_key_file = "/var/lib/fediversity-lab/id_ed25519"

  incus {
    socket  = "/var/lib/incus/unix.socket"
    project = "default"
  }

  timings {
    node_wait      = "2m"
    switch_timeout = "10m"
  }
}
