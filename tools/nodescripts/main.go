// Command nodescripts prints, for every shell script and command the provider sends to a
// node, the external commands it calls, and fails when one of them is neither in a
// default NixOS system (lab/nixos/default-commands) nor named by an absolute path. A
// script that runs in a systemd unit (systemd-run) may call only systemd's own commands
// and the shell's builtins: on NixOS a unit's PATH is systemd's bin directory alone.
//
// The scripts are read from the Go source itself, so a new one cannot escape: every
// `"sh", "-c", X` (or "/bin/sh") in the non-test files under internal/ and cmd/, in a
// composite literal or a call's arguments, has X evaluated from the package's constants
// (string literals, constants and variables joined with +, across packages); every
// argv a Run, Exec or runSys call is given has its command checked. A script the
// source builds at run time is allowed only when listed in dynamicScripts with why.
//
// Usage (from the repository's root): go run ./tools/nodescripts [-q]
// (make lint runs it; its test runs it as part of the unit tests).
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	quiet := flag.Bool("q", false, "print only the faults")
	flag.Parse()
	rep, err := Check(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodescripts:", err)
		os.Exit(2)
	}
	if !*quiet {
		rep.Print(os.Stdout)
	}
	for _, f := range rep.Known {
		fmt.Fprintln(os.Stderr, "KNOWN:", f)
	}
	for _, f := range rep.Faults {
		fmt.Fprintln(os.Stderr, "FAULT:", f)
	}
	if len(rep.Faults) > 0 {
		fmt.Fprintf(os.Stderr, "nodescripts: %d node-side commands a NixOS node does not have (add the tool to lab/nixos/default-commands only if every default NixOS system has it; else name it by absolute path)\n", len(rep.Faults))
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "nodescripts: %d scripts and %d commands sent to nodes, every command one a NixOS node has\n", len(rep.Scripts), len(rep.Commands))
}
