package submission

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/methods"
)

// Input is one evaluation: what the data source was given.
type Input struct {
	// Submission is the submitted configuration as read (a JSON object). Nil means no
	// submission: the baked configuration is planned as it is.
	Submission []byte
	// Baked is the baked configuration (a JSON object, see the package comment).
	Baked []byte
	// Method is the picked deployment method, one of Methods.
	Method string
	// IdentityKeys are the declared node identity keys; only these reach a plan.
	IdentityKeys []string
	// Identity gives values of identity keys for every node; a node's own baked
	// "identity" entry wins over it. Keys that are not declared are ignored.
	Identity map[string]string
	// OperatorRoot is the absolute path of the operator tree. File references are
	// stored relative to it.
	OperatorRoot string
	// PerRunValues are per-run values (label → value, e.g. "ssh_private_key_file" →
	// its path). A plan that holds one of them is refused: a credential location is
	// never part of a node plan.
	PerRunValues map[string]string
}

// Result is what one evaluation publishes.
type Result struct {
	// Digest is the sha256 hex of the canonical JSON of the submission as read
	// (before any merge); empty without a submission.
	Digest string
	// Merged is the canonical JSON of the merged configuration.
	Merged string
	// NodePlans maps each enabled node to the canonical JSON of its plan.
	NodePlans map[string]string
	// NodePlanDigests maps each enabled node to the sha256 hex of its plan.
	NodePlanDigests map[string]string
	// EnabledNodes are the nodes that run at least one enabled application, sorted.
	// They are exactly the keys of NodePlans.
	EnabledNodes []string
	// DisabledApplications are the applications of the merged configuration that are
	// not enabled, sorted.
	DisabledApplications []string
	// Warnings are facts the operator should know that do not stop the plan.
	Warnings []string
}

// Evaluate reads the submission, merges it into the baked configuration and writes
// the plan of every enabled node. It returns Errors listing every problem it found.
func Evaluate(in Input) (*Result, error) {
	var errs Errors
	res := &Result{NodePlans: map[string]string{}, NodePlanDigests: map[string]string{}}
	warn := func(s string) { res.Warnings = append(res.Warnings, s) }

	if !isMethod(in.Method) {
		errs.add(InMethod, "", "method", fmt.Sprintf("%q is not a deployment method", in.Method),
			"pick one of "+strings.Join(Methods, ", "))
	}
	checkIdentityKeys(in.IdentityKeys, &errs)
	if !filepath.IsAbs(in.OperatorRoot) {
		errs.add("", "", "operator_root", fmt.Sprintf("the operator tree root %q is not an absolute path", in.OperatorRoot), "")
	}

	bakedV, err := Parse(in.Baked)
	if err != nil {
		return nil, append(errs, withIn(err, InBaked)...)
	}
	baked, ok := bakedV.(map[string]any)
	if !ok {
		errs.add(InBaked, "", "$", "the baked configuration is "+jsonKind(bakedV)+", not an object",
			`write it as {"nodes": {…}, "applications": {…}, "domain": "…", "email": "…"}`)
		return nil, errs
	}
	for _, k := range sortedKeys(baked) {
		if isMethod(k) {
			errs.add(InBaked, "", JoinKey("$", k), "the baked configuration holds a method branch",
				"only a submission has method branches; put these values at the top level of the baked configuration")
		}
	}
	checkTopLevel(baked, InBaked, "$", &errs)
	checkMethodForGroup(in.Method, baked, &errs)

	sub := map[string]any{}
	if in.Submission != nil {
		subV, err := Parse(in.Submission)
		if err != nil {
			return nil, append(errs, withIn(err, InSubmission)...)
		}
		obj, ok := subV.(map[string]any)
		if !ok {
			errs.add(InSubmission, "", "$", "the submission is "+jsonKind(subV)+", not an object",
				`submit an object such as {"applications": {"mastodon": {"enable": true}}, "domain": "…", "email": "…"}`)
			return nil, errs
		}
		if res.Digest, err = DigestOf(obj); err != nil {
			return nil, append(errs, &PathError{In: InSubmission, Path: "$", Problem: err.Error()})
		}
		checkTopLevel(obj, InSubmission, "$", &errs)
		if branch, ok := obj[in.Method].(map[string]any); ok {
			checkTopLevel(branch, InSubmission, JoinKey("$", in.Method), &errs)
		}
		sub = raiseBranch(obj, in.Method, &errs, warn)
	}
	if len(errs) > 0 {
		return nil, errs
	}

	merged := mergeConfig(baked, sub)
	apps, _ := merged["applications"].(map[string]any)
	nodes := checkNodes(merged, apps, in.Submission != nil, &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	mergedText, err := Canonical(merged)
	if err != nil {
		return nil, append(errs, &PathError{In: InMerged, Path: "$", Problem: err.Error()})
	}
	res.Merged = string(mergedText)

	for _, name := range sortedKeys(apps) {
		if !appEnabled(apps, name) {
			res.DisabledApplications = append(res.DisabledApplications, name)
		}
	}
	res.DisabledApplications = nonNil(res.DisabledApplications)

	shared := map[string]any{}
	for k, v := range merged {
		if k != "nodes" && k != "applications" && k != "domain" && k != "email" {
			shared[k] = v
		}
	}
	checker := newPlanChecker(in.OperatorRoot, in.PerRunValues, &errs)
	runs := map[string]bool{}
	for _, name := range sortedKeys(nodes) {
		node := nodes[name].(map[string]any)
		planApps := map[string]any{}
		for _, a := range nodeApplications(node) {
			if appEnabled(apps, a) {
				planApps[a] = apps[a]
				runs[a] = true
			}
		}
		if len(planApps) == 0 {
			continue
		}
		settings := map[string]any{}
		for k, v := range node {
			if k != "applications" && k != "identity" {
				settings[k] = v
			}
		}
		plan := map[string]any{
			"node":         name,
			"method":       in.Method,
			"applications": planApps,
			"identity":     nodeIdentity(node, in.IdentityKeys, in.Identity),
			"settings":     settings,
			"shared":       shared,
		}
		for _, k := range []string{"domain", "email"} {
			if v, ok := merged[k]; ok {
				plan[k] = v
			}
		}
		checked := checker.check(name, plan, sub)
		text, err := Canonical(checked)
		if err != nil {
			errs.add(InNodePlan, name, JoinKey("$.nodes", name), err.Error(), "")
			continue
		}
		res.NodePlans[name] = string(text)
		res.NodePlanDigests[name] = sha256Hex(text)
		res.EnabledNodes = append(res.EnabledNodes, name)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	res.EnabledNodes = nonNil(res.EnabledNodes)
	for _, name := range sortedKeys(apps) {
		if appEnabled(apps, name) && !runs[name] {
			warn(fmt.Sprintf("Application %s is enabled, but no node lists it, so it runs nowhere. "+
				"Add it to the applications of a node in the baked configuration, or do not enable it.", name))
		}
	}
	if len(res.EnabledNodes) == 0 {
		warn("No node runs an enabled application, so there is no node plan and nothing will be deployed.")
	}
	return res, nil
}

// checkNodes checks the node map of the merged configuration and returns it. A node
// map that publishes no node names is refused when a submission is given.
func checkNodes(merged, apps map[string]any, haveSubmission bool, errs *Errors) map[string]any {
	raw, ok := merged["nodes"]
	if !ok || raw == nil {
		if haveSubmission {
			errs.add(InMerged, "", "$.nodes", "the baked configuration publishes no node names, so a submission cannot be deployed",
				`list the nodes in the baked configuration: {"nodes": {"web01": {"applications": ["mastodon"]}}}`)
		}
		return map[string]any{}
	}
	nodes, ok := raw.(map[string]any)
	if !ok {
		errs.add(InMerged, "", "$.nodes", "nodes is "+jsonKind(raw)+", not an object",
			`write it as {"web01": {"applications": ["mastodon"]}, …}`)
		return nil
	}
	if len(nodes) == 0 && haveSubmission {
		errs.add(InMerged, "", "$.nodes", "the node map is empty: it publishes no node names, so a submission cannot be deployed",
			`list the nodes in the baked configuration: {"nodes": {"web01": {"applications": ["mastodon"]}}}`)
	}
	for _, name := range sortedKeys(nodes) {
		at := JoinKey("$.nodes", name)
		if name == "" {
			errs.add(InMerged, "", at, "a node has an empty name", "give every node a name")
		}
		node, ok := nodes[name].(map[string]any)
		if !ok {
			errs.add(InMerged, "", at, "the node's entry is "+jsonKind(nodes[name])+", not an object",
				`write it as {"applications": ["mastodon"], "identity": {…}}`)
			continue
		}
		if id, ok := node["identity"]; ok {
			if _, isObj := id.(map[string]any); !isObj {
				errs.add(InMerged, "", JoinKey(at, "identity"), "identity is "+jsonKind(id)+", not an object", "")
			}
		}
		rawApps, ok := node["applications"]
		if !ok {
			continue
		}
		list, ok := rawApps.([]any)
		if !ok {
			errs.add(InMerged, "", JoinKey(at, "applications"), "applications of a node is "+jsonKind(rawApps)+", not a list of names",
				`write it as ["mastodon", "pixelfed"]`)
			continue
		}
		for i, e := range list {
			eat := JoinIndex(JoinKey(at, "applications"), i)
			a, ok := e.(string)
			if !ok {
				errs.add(InMerged, "", eat, "an application name is "+jsonKind(e)+", not a string", "")
				continue
			}
			if _, defined := apps[a]; !defined {
				errs.add(InMerged, "", eat, fmt.Sprintf("node %s lists application %s, which the configuration does not define", name, a),
					`define it under "applications" in the baked configuration, or remove it from the node`)
			}
		}
	}
	return nodes
}

func nodeApplications(node map[string]any) []string {
	list, _ := node["applications"].([]any)
	var out []string
	for _, e := range list {
		if s, ok := e.(string); ok && !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// nodeIdentity keeps only the declared identity keys: the node's own baked value
// first, then the value given for every node.
func nodeIdentity(node map[string]any, keys []string, global map[string]string) map[string]any {
	own, _ := node["identity"].(map[string]any)
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := own[k]; ok {
			out[k] = v
		} else if v, ok := global[k]; ok {
			out[k] = v
		}
	}
	return out
}

func checkIdentityKeys(keys []string, errs *Errors) {
	seen := map[string]bool{}
	for i, k := range keys {
		at := fmt.Sprintf("identity_keys[%d]", i)
		switch {
		case strings.TrimSpace(k) == "":
			errs.add(InIdentityKeys, "", at, "an identity key is empty", "remove it")
		case seen[k]:
			errs.add(InIdentityKeys, "", at, fmt.Sprintf("identity key %q is declared twice", k), "remove one")
		case IsCredentialKey(k):
			errs.add(InIdentityKeys, "", at,
				fmt.Sprintf("identity key %q names a per-run credential location, which is never part of a node identity", k),
				"remove it from identity_keys; credentials are given to the provider or to the resources, and a different location on each run must not redeploy a node")
		}
		seen[k] = true
	}
}

// credentialWords mark a key as the location or value of a deployer credential (an SSH
// key or agent socket, a kubeconfig, a registry auth file, a staged credential). The
// key is compared lower-cased without "_", "-" and ".".
var credentialWords = []string{
	"privatekey", "sshkey", "identityfile", "authsock", "kubeconfig", "registryauth", "authfile",
	"credential", "password", "passwd", "token", "secret", "clientkey", "clientcert",
}

// IsCredentialKey tells whether an identity key names a deployer credential, which
// is a per-run value and never part of a node identity.
func IsCredentialKey(key string) bool {
	n := strings.NewReplacer("_", "", "-", "", ".", "").Replace(strings.ToLower(key))
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// planChecker checks that a node plan is data and stores every file
// reference relative to the operator tree.
type planChecker struct {
	root     string
	rootReal string
	perRun   map[string]string
	errs     *Errors
	node     string
	// src and fromSub are where the value being checked lives in the configuration the
	// operator wrote, and whether the submission set it.
	src     string
	fromSub bool
}

func newPlanChecker(root string, perRun map[string]string, errs *Errors) *planChecker {
	c := &planChecker{root: filepath.Clean(root), perRun: perRun, errs: errs}
	if real, err := filepath.EvalSymlinks(c.root); err == nil {
		c.rootReal = real
	}
	return c
}

func (c *planChecker) check(node string, plan map[string]any, sub map[string]any) any {
	c.node = node
	at := JoinKey("$.nodes", node)
	subNode, _ := lookup(sub, "nodes", node).(map[string]any)
	out := make(map[string]any, len(plan))
	for _, k := range sortedKeys(plan) {
		v := plan[k]
		part := map[string]any{}
		switch k {
		case "applications", "settings", "shared":
			m, _ := v.(map[string]any)
			for _, e := range sortedKeys(m) {
				// Where the value lives in the configuration the operator wrote.
				src, subV := JoinKey("$", e), lookup(sub, e)
				switch k {
				case "applications":
					src, subV = JoinKey("$.applications", e), lookup(sub, "applications", e)
				case "settings":
					src, subV = JoinKey(at, e), lookup(subNode, e)
				}
				part[e] = c.walk(m[e], JoinKey(JoinKey(at, k), e), src, subV)
			}
			out[k] = part
		case "identity":
			out[k] = c.walk(v, JoinKey(at, k), JoinKey(at, k), lookup(subNode, k))
		default:
			out[k] = c.walk(v, JoinKey(at, k), JoinKey("$", k), lookup(sub, k))
		}
	}
	return out
}

// lookup follows keys through nested objects; nil when a key is missing.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (c *planChecker) fail(at, problem, fix string) {
	c.errs.add(InNodePlan, c.node, at, problem, fix)
	e := (*c.errs)[len(*c.errs)-1]
	e.SourcePath = c.src
	e.Source = InBaked
	if c.fromSub {
		e.Source = InSubmission
	}
}

// walk checks v, found at at in the node plan; src is the same place in the
// configuration the operator wrote, and sub the submission's value there (nil: the
// value comes from the baked configuration).
func (c *planChecker) walk(v any, at, src string, sub any) any {
	c.src, c.fromSub = src, sub != nil
	switch t := v.(type) {
	case map[string]any:
		if ref, ok := t[FileRefKey]; ok {
			return c.fileRef(t, ref, at)
		}
		if _, ok := t["__functor"]; ok {
			c.fail(JoinKey(at, "__functor"), "a Nix functor is a function, not data",
				"write the value it computes")
			return t
		}
		if kind, ok := t["_type"]; ok {
			c.fail(JoinKey(at, "_type"), fmt.Sprintf("a Nix module-system value (_type %s, as from mkIf, mkForce or mkOverride) is not data", shortJSON(kind)),
				"write the plain value it stands for")
			return t
		}
		if t["type"] == "derivation" {
			c.fail(at, "a derivation is not data",
				`reference the file it is built from with {"_file": "<path in the operator tree>"}`)
			return t
		}
		out := make(map[string]any, len(t))
		for _, k := range sortedKeys(t) {
			out[k] = c.walk(t[k], JoinKey(at, k), JoinKey(src, k), lookup(sub, k))
		}
		return out
	case []any:
		out := make([]any, len(t))
		subList, _ := sub.([]any)
		for i, e := range t {
			var subE any
			if i < len(subList) {
				subE = subList[i]
			}
			out[i] = c.walk(e, JoinIndex(at, i), JoinIndex(src, i), subE)
		}
		return out
	case string:
		c.checkString(t, at)
		return t
	default:
		return v
	}
}

// FileRefKey marks a file reference: {"_file": "relative/path"}.
const FileRefKey = "_file"

var storePath = regexp.MustCompile(`/nix/store/[0-9abcdfghijklmnpqrsvwxyz]{32}-`)

// unknownValueMarker is the placeholder Terraform's SDK writes for a value not yet known.
const unknownValueMarker = "74D93920-ED26-11E3-AC10-0800200C9A66"

// nixPrinterMarkers are what `nix eval` and `nix-instantiate --eval` print in place of a
// value that is not data (a function, a thunk, a cycle).
var nixPrinterMarkers = []string{"«lambda", "«primop", "«thunk", "«repeated", "«potential infinite recursion", "«error", "«derivation",
	"<LAMBDA>", "<PRIMOP>", "<PRIMOP-APP>", "<CODE>", "<CYCLE>"}

func (c *planChecker) checkString(s, at string) {
	if m := storePath.FindString(s); m != "" {
		c.fail(at, "the value names a Nix store path, a build result and not data of the operator tree",
			`reference the source file with {"_file": "<path in the operator tree>"} instead`)
		return
	}
	if strings.Contains(s, "${") {
		c.fail(at, "the value holds an unevaluated interpolation (${…}), not data",
			"submit the evaluated value")
		return
	}
	if strings.Contains(s, unknownValueMarker) {
		c.fail(at, "the value is the placeholder of a value not yet known, not data",
			"submit the value once it is known")
		return
	}
	for _, m := range nixPrinterMarkers {
		if strings.HasPrefix(s, m) {
			c.fail(at, fmt.Sprintf("the value %s is how Nix prints a function or an unevaluated value, not data", shortJSON(s)),
				"submit the evaluated value")
			return
		}
	}
	c.checkPerRun(s, at)
}

func (c *planChecker) checkPerRun(s, at string) {
	labels := make([]string, 0, len(c.perRun))
	for l := range c.perRun {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	for _, l := range labels {
		v := c.perRun[l]
		if holdsPath(s, v) {
			c.fail(at, fmt.Sprintf("the value holds the location given by %s, a per-run credential that never enters a node plan", l),
				"remove it from the submission and the baked configuration; the provider hands credentials to the deploy on each run")
			return
		}
	}
}

// fileRef checks one file reference and returns it with its path relative to the
// operator tree.
func (c *planChecker) fileRef(obj map[string]any, ref any, at string) any {
	p, ok := ref.(string)
	if !ok || p == "" || len(obj) != 1 {
		c.fail(at, `a file reference must be an object with the one key "_file" and a non-empty string value`,
			`write it as {"_file": "relative/path/in/the/operator/tree"}`)
		return obj
	}
	var rel string
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(c.root, filepath.Clean(p))
		if err != nil || escapes(r) {
			c.fail(at, fmt.Sprintf("the file %s is outside the operator tree %s", p, c.root),
				"move the file into the operator tree and reference it relative to it, or set operator_root to the tree that holds it")
			return obj
		}
		rel = r
	} else {
		rel = filepath.Clean(p)
		if escapes(rel) {
			c.fail(at, fmt.Sprintf("the relative path %s leaves the operator tree %s", p, c.root),
				"reference a file inside the operator tree")
			return obj
		}
	}
	abs := filepath.Join(c.root, rel)
	if c.rootReal != "" {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			if r, err := filepath.Rel(c.rootReal, real); err != nil || escapes(r) {
				c.fail(at, fmt.Sprintf("the file %s is a link to %s, outside the operator tree %s", p, real, c.root),
					"copy the file into the operator tree")
				return obj
			}
		} else if !os.IsNotExist(err) {
			c.fail(at, fmt.Sprintf("the file %s cannot be resolved: %v", p, err), "")
			return obj
		}
	}
	for l, v := range c.perRun {
		if v != "" && filepath.Clean(v) == abs {
			c.fail(at, fmt.Sprintf("the file is the location given by %s, a per-run credential that never enters a node plan", l),
				"remove the reference; the provider hands credentials to the deploy on each run")
			return obj
		}
	}
	return map[string]any{FileRefKey: filepath.ToSlash(rel)}
}

// holdsPath tells whether s names the path p: p appears in s and is not merely the
// start of a longer name ("/run/key" is not held by "/run/keys/x").
func holdsPath(s, p string) bool {
	if len(p) < 2 {
		return false
	}
	for i := 0; ; {
		j := strings.Index(s[i:], p)
		if j < 0 {
			return false
		}
		end := i + j + len(p)
		if end == len(s) || !isNameByte(s[end]) {
			return true
		}
		i += j + 1
	}
}

func isNameByte(b byte) bool {
	return b == '.' || b == '_' || b == '-' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func escapes(rel string) bool {
	return rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func shortJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 60 {
		return string(b[:57]) + "…"
	}
	return string(b)
}

// checkMethodForGroup refuses a method the group cannot use, through the catalog's one
// per-group lookup: the operator methods serve a group that runs an application.
func checkMethodForGroup(method string, baked map[string]any, errs *Errors) {
	if !isMethod(method) {
		return // refused above
	}
	apps, _ := baked["applications"].(map[string]any)
	available := methods.ForGroup(methods.Group{RunsApplication: len(apps) > 0})
	if !slices.Contains(methods.Names(available), method) {
		errs.add(InMethod, "", "method", fmt.Sprintf("%q is available only for a group that runs an application, and the baked configuration has none", method),
			"pick one of "+strings.Join(methods.Names(available), ", ")+", or add the group's applications to the baked configuration")
	}
}
