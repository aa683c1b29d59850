package main

import (
	"os"
	"strings"
)

// Terraform and OpenTofu show a provider's log only when TF_LOG or TF_LOG_PROVIDER asks
// for it (they pass their environment on to the provider). Otherwise they still read
// every line the provider writes and drop it, and the plugin SDK logs at TRACE by
// default: about 10,000 JSON lines (5 MB) for an unchanged plan of 16 nodes, encoded
// here and decoded by the CLI for nothing, a fifth of the CPU both spend on that plan
// (docs/bench-history.md#plan-benchmark). So when nobody reads the log, the SDK's log and this
// provider's own are off. A level set for either by hand (TF_LOG_SDK,
// TF_LOG_PROVIDER_FEDIVERSITY) is left as it is.

// logLevelsEnv are the variables the plugin SDK reads the level of its log and of this
// provider's log from (terraform-plugin-go names the provider's after the last part of
// its address).
var logLevelsEnv = []string{"TF_LOG_SDK", "TF_LOG_PROVIDER_FEDIVERSITY"}

// quietLogsNobodyReads turns the SDK's and the provider's log off when the CLI will
// show none of it (see above).
func quietLogsNobodyReads() {
	for k, v := range unreadLogLevels(os.LookupEnv) {
		_ = os.Setenv(k, v) // a failed Setenv only leaves the log on
	}
}

// unreadLogLevels is what quietLogsNobodyReads sets: nothing when TF_LOG or
// TF_LOG_PROVIDER asks for a log, else "off" for each level not set by hand.
func unreadLogLevels(lookup func(string) (string, bool)) map[string]string {
	for _, k := range []string{"TF_LOG", "TF_LOG_PROVIDER"} {
		if v, _ := lookup(k); v != "" && !strings.EqualFold(strings.TrimSpace(v), "off") {
			return nil
		}
	}
	set := map[string]string{}
	for _, k := range logLevelsEnv {
		if _, byHand := lookup(k); !byHand {
			set[k] = "off"
		}
	}
	return set
}
