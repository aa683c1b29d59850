# Import takes the node's transport address; the next apply runs the pass.
terraform import fediversity_verdict.db01 incus://local/tenant-a/db01
terraform import fediversity_verdict.web01 'ssh://root@web01.example.org:22/web01?known_hosts_file=/etc/ssh/ssh_known_hosts'
