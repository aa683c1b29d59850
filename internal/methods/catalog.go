// Package methods is the catalog of the deployment methods (docs/design.md#methods):
// each method's setup (what serves it), the arguments of that setup, its description,
// the environment coordinates it reads, and the groups it is available for. Every
// consumer takes the methods of a group from one lookup, ForGroup: the submission's
// evaluation (which both front ends run) refuses a method the group cannot use.
//
// The environment coordinates are the variables the code reads from the environment,
// each declared once, with a description and a default: a method's own in its entry,
// the ones of the process (the provider's or the command's, whatever the method) in
// Process. A unit test lists every environment variable the code reads and fails on one
// that is declared nowhere.
//
// This package must not import the plugin framework.
package methods

import (
	"slices"
	"sort"
)

// Coordinate is an environment variable that the code reads.
type Coordinate struct {
	Name        string
	Description string
	// Default is what holds when the variable is unset, as text.
	Default string
}

// Method is one entry of the catalog.
type Method struct {
	Name string
	// Setup is what serves the method: a module of this repository or the command.
	Setup string
	// Arguments are the setup's arguments an operator gives (module inputs, or the
	// command's flags), the required ones first.
	Arguments   []string
	Description string
	// Environment are the coordinates the method reads, beyond Process.
	Environment []Coordinate
	// NeedsApplication: available only for a group that runs an application (the
	// operator methods, whose DNS lane, domain and SPIRE registration serve one).
	NeedsApplication bool
}

// The coordinates, each defined once and named by the methods that read it.
var (
	sshKey = Coordinate{"SSH_PRIVATE_KEY_FILE",
		"The SSH private key file of the deployer (nodes reached over SSH, and the spire node). Read at each run, never stored.",
		"none: the SSH agent's keys"}
	sshAgent = Coordinate{"SSH_AUTH_SOCK",
		"The SSH agent's socket, whose keys are tried after SSH_PRIVATE_KEY_FILE's.",
		"none: no agent"}
	nixPath = Coordinate{"NIX_PATH",
		"The Nix search path a `file` or `expression` build may read (`<nixpkgs>`); its value and the trees it names are part of the evaluation cache's key.",
		"empty"}
	incusSocket = Coordinate{"INCUS_SOCKET",
		"The Incus daemon's unix socket (unless the provider's incus block names another daemon).",
		"/var/lib/incus/unix.socket"}
	kubeConfig = Coordinate{"KUBE_CONFIG_PATH",
		"The kubeconfig of the cluster (unless the provider's kube_config_path is set). Per run, never stored.",
		"none: the plan fails naming it"}
	registry = Coordinate{"K8S_REGISTRY",
		"The registry node images are pushed to (unless the provider's k8s_registry is set).",
		"none: the plan fails naming it"}
	namespace = Coordinate{"K8S_NAMESPACE",
		"The namespace of the target (unless the provider's k8s_namespace is set); a per-application target appends -<application>.",
		"fediversity"}
	registryAuth = Coordinate{"REGISTRY_AUTH_FILE",
		"The registry's credentials, a containers auth JSON file (unless the provider's registry_auth_file is set). Read at each push, never stored.",
		"none: anonymous"}
	spireAPIServer = Coordinate{"K8S_SPIRE_API_SERVER",
		"The cluster's API server as the spire node reaches it, written into the kubeconfig of the SPIRE hand-off (unless the hand-off sets api_server).",
		"the kubeconfig's server"}
)

// Catalog is every method, in the order of the design page.
var Catalog = []Method{
	{
		Name: "ssh", Setup: "cmd/fediversity (deploy, verdict, rollback)",
		Arguments:   []string{"--roster", "--submission", "--baked", "--method", "--identity-keys", "--operator-root", "--lenient", "--parallel", "--canary", "--wave-size", "--waves", "--failure-budget", "--activation"},
		Description: "Deploys a closure over SSH to machines that already exist, without a state.",
		Environment: []Coordinate{sshKey, sshAgent, nixPath},
	},
	{
		Name: "tf", Setup: "modules/tf",
		Arguments:   []string{"submission_file", "baked_json", "nodes", "build", "submission_digest", "identity_keys", "identity", "operator_root", "strict", "secret_chain", "loop_budgets", "timings", "activation", "deploy", "canary", "wave_size", "waves", "failure_budget"},
		Description: "The SSH deploy inside an OpenTofu graph, with state.",
		Environment: []Coordinate{sshKey, sshAgent, nixPath},
	},
	{
		Name: "tf-incus", Setup: "modules/tf-incus",
		Arguments:   []string{"submission_file", "baked_json", "nodes", "image", "build", "method", "tenant", "submission_digest", "identity_keys", "identity", "operator_root", "strict", "secret_chain", "loop_budgets", "snapshot_keep", "interrupted_restore", "timings", "activation", "deploy", "canary", "wave_size", "waves", "failure_budget"},
		Description: "Creates a group's Incus containers, from an image of each node's system (in a tenant's project when `tenant` is given), and deploys onto them in one graph.",
		Environment: []Coordinate{incusSocket, nixPath},
	},
	{
		Name: "tf-incus-operator", Setup: "modules/tf-incus (method = \"tf-incus-operator\")",
		Arguments:        []string{"submission_file", "baked_json", "nodes", "method", "spire", "tenant", "addresses", "image", "build", "submission_digest", "identity_keys", "identity", "operator_root", "strict", "secret_chain", "loop_budgets", "snapshot_keep", "interrupted_restore", "timings", "activation", "deploy", "canary", "wave_size", "waves", "failure_budget"},
		Description:      "tf-incus plus the tenant's shared resources (its Incus project and profile), the DNS records and the domain, and the SPIRE registration of every node.",
		Environment:      []Coordinate{incusSocket, nixPath, sshKey, sshAgent},
		NeedsApplication: true,
	},
	{
		Name: "k8s", Setup: "modules/k8s",
		Arguments:   []string{"submission_file", "baked_json", "nodes", "method", "app", "runtime_class", "storage_class", "storage_size", "submission_digest", "identity_keys", "identity", "operator_root", "strict", "timings", "deploy", "canary", "wave_size", "waves", "failure_budget"},
		Description: "Runs each node as the one pod of a Deployment, from an image of its system built in the graph.",
		Environment: []Coordinate{kubeConfig, registry, namespace, registryAuth, nixPath},
	},
	{
		Name: "k8s-operator", Setup: "modules/k8s (method = \"k8s-operator\")",
		Arguments:        []string{"submission_file", "baked_json", "nodes", "method", "spire_handoff", "addresses", "app", "runtime_class", "storage_class", "storage_size", "submission_digest", "identity_keys", "identity", "operator_root", "strict", "timings", "deploy", "canary", "wave_size", "waves", "failure_budget"},
		Description:      "k8s plus the DNS records and the domain, and the SPIRE hand-off to the cluster.",
		Environment:      []Coordinate{kubeConfig, registry, namespace, registryAuth, nixPath, sshKey, sshAgent, spireAPIServer},
		NeedsApplication: true,
	},
}

// Process are the coordinates the provider's or the command's process reads whatever
// the method: how it logs, collects garbage, prints, and where its own temporary files
// are (the per-run rule).
var Process = []Coordinate{
	{"TF_LOG", "Terraform's and OpenTofu's log level; when it (or TF_LOG_PROVIDER) asks for a log, the provider keeps its own.", "off"},
	{"TF_LOG_PROVIDER", "The log level of providers only (see TF_LOG).", "off"},
	{"TF_LOG_SDK", "The plugin SDK's log level, when set by hand; else off while nobody reads the log.", "off"},
	{"TF_LOG_PROVIDER_FEDIVERSITY", "This provider's log level, when set by hand; else off while nobody reads the log.", "off"},
	{"GOGC", "The Go garbage collector's target; the provider sets 50 when it is unset.", "50"},
	{"TERM", "The terminal type: `dumb` turns off the command's live progress lines.", "none"},
	{"TMPDIR", "A run's own temporary directory: a path under it is a per-run value, never part of a node plan.", "/tmp"},
	{"XDG_RUNTIME_DIR", "A run's own runtime directory (see TMPDIR).", "none"},
	{"RUNNER_TEMP", "A CI runner's temporary directory (see TMPDIR).", "none"},
}

// Group is what the lookup needs to know of a group.
type Group struct {
	// RunsApplication: the group's baked configuration has at least one application.
	RunsApplication bool
}

// ForGroup is the one per-group lookup: the methods available for g, in catalog order.
func ForGroup(g Group) []Method {
	var out []Method
	for _, m := range Catalog {
		if !m.NeedsApplication || g.RunsApplication {
			out = append(out, m)
		}
	}
	return out
}

// Lookup is the catalog entry named name.
func Lookup(name string) (Method, bool) {
	i := slices.IndexFunc(Catalog, func(m Method) bool { return m.Name == name })
	if i < 0 {
		return Method{}, false
	}
	return Catalog[i], true
}

// Names lists the methods' names, in catalog order.
func Names(ms []Method) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// Declared is every coordinate the catalog declares (the methods' and the process'),
// by name.
func Declared() map[string]Coordinate {
	out := map[string]Coordinate{}
	for _, m := range Catalog {
		for _, c := range m.Environment {
			out[c.Name] = c
		}
	}
	for _, c := range Process {
		out[c.Name] = c
	}
	return out
}

// KeySet is the names of the coordinates method m reads: its own and the process', sorted.
func (m Method) KeySet() []string {
	var out []string
	for _, c := range append(append([]Coordinate{}, m.Environment...), Process...) {
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return slices.Compact(out)
}
