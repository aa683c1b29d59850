# Run on a lab node (sh -c "$(cat lab/host-key-whole.sh)"): make its ed25519 host key
# whole before anyone pins it. The lab image makes the host keys in sshd's
# ExecStartPre; a boot cut off in the middle can leave the private key without its
# .pub, which `ssh-keygen -A` then never writes (it looks at the private key only): a
# cold CI run once pinned an empty key that way. So the public key is made from the
# private one, or both afresh when the private one is not whole. Used by lab/lab.sh,
# lab/spire/up.sh, the benchmarks and labtest's throwaway nodes. Lab machinery, not the
# product: it names Debian's directories, which a NixOS login's PATH lacks.
PATH=/usr/bin:/usr/sbin
k=/etc/ssh/ssh_host_ed25519_key
test -s $k || ssh-keygen -A >/dev/null
test -s $k.pub || ssh-keygen -y -f $k >$k.pub 2>/dev/null || { rm -f $k $k.pub; ssh-keygen -A >/dev/null; }
