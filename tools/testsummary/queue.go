package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// The queue lab/test.sh's acceptance shards take their jobs from: one
// "<group> <binary> <test binary> <test>" line per job, longest first (`order`). Each
// shard takes its next job when the one before ended, so that a shard that runs fast
// takes the jobs a slow one would have had, and the shards end within one short test of
// each other, however far this run's times are from the recorded ones. A deal made
// before the run put them 16 minutes apart (74 and 58 minutes in one run).

// Take removes from the queue at path the first job under binary in the first of groups
// (by preference) that has one, and returns its line; "" when none is left. An
// exclusive lock on path+".lock" makes each job taken once, by one shard.
func Take(path, binary string, groups []string) (string, error) {
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // which unlocks it
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking the queue: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	taken := -1
	for _, group := range groups {
		for i, line := range lines {
			if f := strings.Fields(line); len(f) == 4 && f[0] == group && f[1] == binary {
				taken = i
				break
			}
		}
		if taken >= 0 {
			break
		}
	}
	if taken < 0 {
		return "", nil
	}
	job := lines[taken]
	rest := append(lines[:taken:taken], lines[taken+1:]...)
	text := ""
	if len(rest) > 0 {
		text = strings.Join(rest, "\n") + "\n"
	}
	tmp := path + ".taking"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return "", err
	}
	return job, os.Rename(tmp, path)
}

func takeCommand(args []string, out io.Writer) error {
	fs := newFlagSet("take")
	queue := fs.String("queue", "", "the queue file")
	binary := fs.String("binary", "", "Terraform or OpenTofu")
	groups := fs.String("groups", "", "the groups this shard takes from, by preference (\"k8s nodes\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *queue == "" || *binary == "" || *groups == "" || fs.NArg() != 0 {
		usage()
	}
	job, err := Take(*queue, *binary, strings.Fields(*groups))
	if err != nil || job == "" {
		return err
	}
	_, err = fmt.Fprintln(out, job)
	return err
}
