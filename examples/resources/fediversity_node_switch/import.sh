# A node reached over SSH: ssh://[user@]host[:port]/<node>. Pin its host key with
# ?known_hosts_file=<file> (or ?host_key=<url-encoded key>) so the import can read
# which system it runs.
terraform import fediversity_node_switch.web01 'ssh://root@web01.example.org:22/web01?known_hosts_file=/etc/ssh/ssh_known_hosts'

# An Incus instance: incus://<remote>/<project>/<instance> (remote "local" = the
# provider's Incus connection).
terraform import fediversity_node_switch.db01 incus://local/tenant-a/db01
