package main

import "github.com/fediversity/terraform-provider-fediversity/internal/deploybody"

// module is what makes one group module differ in the parts this tool writes: the
// texts that speak of its own objects, the roster keys its nodes take (and why it takes
// no others), its own node keys, and the objects whose timings it hands on. Everything
// else in those parts is the same for every module, and what is a module's own alone
// (its resources, its other variables and outputs) is written by hand in its files.
type module struct {
	// Name is the module's directory under modules/ and its method. The description
	// of its var.nodes is texts/<Name>.nodes.txt.
	Name string
	// RosterKeys are the keys of a roster's node entry (fleet.RosterNode) its nodes take,
	// with their nested keys; allRosterKeys takes every one, so that a key the node spec
	// gains reaches the module on the next `make generate`.
	RosterKeys []string
	// NotRosterKeys says, for every other roster key, why the module does not take it.
	// A roster key in neither list fails TestModulesTakeTheRostersKeys: a key the node
	// spec gains needs a decision for every module.
	NotRosterKeys map[string]string
	// OwnKeys are the module's own node keys and their Terraform types, after the
	// roster's.
	OwnKeys []ownKey
	// TimingObjects are the objects whose timings var.timings sets: its keys are the
	// timing table's rows these objects read.
	TimingObjects []string
	// OwnTimings are var.timings keys that are no row of the table.
	OwnTimings []ownKey
	// Timings, Canary and FailureBudget are the descriptions of those variables.
	Timings string
	// GroupBuild: var.build, the build of every node whose entry has none.
	GroupBuild bool
	// DNS: the DNS lane of the operator variants (var.addresses, the dns_records output).
	DNS bool
	// SettingProblems: the module refuses settings that do not go together before the
	// submission is read, with the messages of local.setting_problems (its main.tf).
	SettingProblems bool
	// Unlisted ends the message that refuses a submission enabling nodes var.nodes lacks.
	Unlisted      string
	Canary        string
	FailureBudget string
}

type ownKey struct{ Name, Type string }

const allRosterKeys = "*"

// Why a module does not take a roster key.
const (
	sshOnly      = "SSH: this module reaches each node over Incus (the container it made, or the instance named)"
	notPerNode   = "a group-wide setting of this module (its variable of the same name), not one per node"
	incusTarget  = "this module names an existing instance with its own `instance` and `project` keys"
	incusSnap    = "the snapshot guard is group-wide here: var.snapshot_keep and var.interrupted_restore"
	k8sNoNixOS   = "a k8s node is a pod: it has no NixOS switch, units or SSH to reach; its image is built from its toplevel or build"
	k8sGroupWide = "a group-wide setting of this module (var.strict), not one per node"
)

var modules = []module{
	{
		Name:          "tf",
		RosterKeys:    []string{allRosterKeys},
		TimingObjects: []string{deploybody.ObjectNodeSwitch},
		Timings:       "Waits and thresholds for every node (Go durations); a node's own `timings` win, and unset ones come from the provider's timings.",
		GroupBuild:    true,
		Unlisted:      "Add how to reach and build each of them to var.nodes.",
		Canary:        "Staged rollout: the first wave, a canary of this many nodes (the first by name). 0 (default): no canary. See docs/guides/tf.md#staged-rollouts.",
		FailureBudget: "Staged rollout: how many nodes may fail before the rollout halts, a count (\"1\") or a percentage of the group, rounded down (\"20%\"). Past it the gate after the wave fails the apply and later waves are not touched. Default: no budget. A budget above 0 needs strict = false (a strict failure fails its own node's resource, and so every later wave).",
	},
	{
		Name:       "tf-incus",
		RosterKeys: []string{"toplevel", "build"},
		NotRosterKeys: map[string]string{
			"host": sshOnly, "port": sshOnly, "user": sshOnly, "sudo": sshOnly, "host_key": sshOnly, "known_hosts_file": sshOnly,
			"insecure_ignore_host_key": sshOnly, "keepalive": sshOnly, "revert_on_lockout": sshOnly, "jump": sshOnly,
			"incus":    incusTarget,
			"snapshot": incusSnap,
			"strict":   notPerNode, "activation": notPerNode, "secret_chain": notPerNode, "loop_budgets": notPerNode, "timings": notPerNode,
			"checks": "not offered by this module yet: its nodes are judged by their units (use modules/tf with `incus` entries for checks and probes)",
			"probes": "not offered by this module yet: its nodes are judged by their units (use modules/tf with `incus` entries for checks and probes)",
		},
		OwnKeys: []ownKey{
			{"instance", "optional(string)"},
			{"project", "optional(string)"},
			{"container", "optional(string)"},
			{"image", "optional(string)"},
			{"profiles", "optional(list(string))"},
			{"config", "optional(map(string))"},
			{"limits", "optional(map(string))"},
			{"devices", "optional(list(object({\nname = string\ntype = string\nproperties = map(string)\n})), [])"},
			{"data_volume", "optional(object({\nenabled = optional(bool, true)\npath = optional(string)\npool = optional(string)\nsize = optional(string)\ndelete_on_destroy = optional(bool)\n}), {})"},
		},
		TimingObjects: []string{deploybody.ObjectNodeSwitch, deploybody.ObjectVerdict},
		OwnTimings: []ownKey{
			{"verdict_settle", "optional(string)"},
			{"verdict_watch", "optional(string)"},
		},
		Timings: "Waits and thresholds for every node (Go durations); unset ones come from the provider's timings. " +
			"`node_wait` also bounds how long a new container may take to boot; `verdict_settle` and `verdict_watch` are the settle and watch of the " +
			"verdict-only pass (fediversity_verdict; default: settle and watch).",
		GroupBuild:      true,
		DNS:             true,
		SettingProblems: true,
		Unlisted:        "Add each of them to var.nodes (a container to create, or an existing instance).",
		Canary:          "Staged rollout: the first wave, a canary of this many nodes (the first by name). 0 (default): no canary. See docs/guides/tf-incus.md#staged-rollouts.",
		FailureBudget:   "Staged rollout: how many nodes may fail before the rollout halts, a count (\"1\") or a percentage of the group, rounded down (\"20%\"). Past it the gate after the wave fails the apply and the nodes of later waves are not touched: nothing is registered, copied to or switched on them (their containers are made up front, before the first wave, as the image makes them). Default: no budget. A budget above 0 needs strict = false (a strict failure fails its own node's resource, and so every later wave).",
	},
	{
		Name:       "k8s",
		RosterKeys: []string{"toplevel", "build"},
		NotRosterKeys: map[string]string{
			"host": k8sNoNixOS, "port": k8sNoNixOS, "user": k8sNoNixOS, "sudo": k8sNoNixOS, "host_key": k8sNoNixOS, "known_hosts_file": k8sNoNixOS,
			"insecure_ignore_host_key": k8sNoNixOS, "keepalive": k8sNoNixOS, "revert_on_lockout": k8sNoNixOS, "jump": k8sNoNixOS,
			"incus": k8sNoNixOS, "snapshot": k8sNoNixOS, "activation": k8sNoNixOS, "secret_chain": k8sNoNixOS, "loop_budgets": k8sNoNixOS,
			"checks": k8sNoNixOS, "probes": k8sNoNixOS,
			"timings": "a rollout's timings are the group's (var.timings: rollout_wait, pull_grace), not the node run's",
			"strict":  k8sGroupWide,
		},
		OwnKeys: []ownKey{
			{"archive", "optional(string)"},
			{"tag", "optional(string)"},
			{"storage_size", "optional(string)"},
		},
		TimingObjects: []string{deploybody.ObjectK8sRollout},
		Timings:       "Waits of every rollout (Go durations); unset ones come from the provider's timings.",
		DNS:           true,
		Unlisted:      "Add each node's image to var.nodes.",
		Canary:        "Staged rollout: the first wave, a canary of this many nodes (the first by name). 0 (default): no canary. See docs/guides/k8s.md#staged-rollouts: changing the layout of a group already rolled out moves nodes between waves, which deletes their Deployment and claim unless their state is moved first.",
		FailureBudget: "Staged rollout: how many nodes may fail (a rollout that did not end ready) before the rollout halts, a count (\"1\") or a percentage of the group, rounded down (\"20%\"). Past it the gate after the wave fails the apply and the nodes of later waves are not touched: no image is built or pushed for them, and their Deployment and claim are neither made nor changed. Default: no budget. A budget above 0 needs strict = false (a strict failure fails its own node's rollout, and so every later wave).",
	},
}
