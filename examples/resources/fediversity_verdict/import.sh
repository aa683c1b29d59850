# The import ID is the node's transport address, as for fediversity_node_switch:
#   ssh://[user@]host[:port]/<node>[?known_hosts_file=<file>|?host_key=<url-encoded key>]
#     (user root and port 22 by default; pin the host key so the next pass can reach it)
#   incus://<remote>/<project>/<instance>[/<node>]
#     (remote "local" = the provider's Incus connection; the node defaults to the instance)
# The import judges nothing: the state has no verdict until the next apply runs the pass.
terraform import fediversity_verdict.db01 incus://local/tenant-a/db01
terraform import fediversity_verdict.web01 'ssh://root@web01.example.org:22/web01?known_hosts_file=/etc/ssh/ssh_known_hosts'
