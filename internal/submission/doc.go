// Package submission reads a submitted configuration, merges it into the baked
// configuration and writes one plan per node (docs/design.md#node-plans). It is the engine
// of the data source fediversity_submission and of the digest re-check the resources
// make at apply. It must not import the plugin framework, any transport or the deploy
// body: it works on JSON bytes and returns plain Go values.
//
// # The baked configuration
//
// A JSON object:
//
//	{
//	  "nodes": {
//	    "web01": {"applications": ["mastodon"], "identity": {"instance": "fedi-n1"}, "module": {"_file": "nodes/web01.nix"}},
//	    "web02": {"applications": ["pixelfed"]}
//	  },
//	  "applications": {"mastodon": {"enable": true}, "pixelfed": {"enable": false}},
//	  "domain": "example.org",
//	  "email": "ops@example.org",
//	  "dns": {"zone": "example.org"}
//	}
//
// "nodes" is the node map: node name → entry. An entry's "applications" lists the
// applications the node runs, each of which must be defined under "applications"; its
// "identity" holds node identity values; every other key is a node setting. A node
// runs an application when it lists it and the merged configuration enables it
// ("enable": true; a missing "enable" is off). A node that runs no enabled application
// is disabled: it gets no plan and is not published. Other top-level keys ("dns" above)
// are shared by every node. The baked configuration has no method branch.
//
// # The submission and the merge
//
// The submission is a JSON object of the same shape, usually only "applications",
// "domain" and "email". It may put those three inside the branch of a method, a
// top-level key named after the method ("tf-incus": {"applications": …}). The merge,
// a pure data merge:
//
//  1. raises "applications", "domain" and "email" out of the branch of the picked
//     method (branch values win; applications merge per application), then removes
//     every method branch. Other keys of the picked branch are dropped with a warning;
//  2. lays the submission over the baked configuration: objects merge key by key, any
//     other value (string, number, list, null) replaces the baked one;
//  3. turns off each application the submission names but does not enable
//     ("enable": true is the only way on); an application the submission does not
//     name keeps its baked entry.
//
// # Node plans
//
// The plan of an enabled node is an object:
//
//	{"node": "web01", "method": "tf-incus", "domain": …, "email": …,
//	 "applications": {only the enabled applications the node runs, merged},
//	 "identity": {declared identity keys only}, "settings": {the node's other keys},
//	 "shared": {the other top-level keys}}
//
// written as canonical JSON (see Canonical). Identity: only keys listed in the declared
// identity keys reach a plan; a node's own baked "identity" value wins over the value
// given for all nodes; undeclared keys are dropped. A declared key that names a
// deployer credential (IsCredentialKey: SSH key or agent socket, kubeconfig, registry
// auth, staged credential, token, password, secret) is refused: credential locations are
// per-run values, so two runs that stage credentials at different places give equal
// plans. The provider also passes its own per-run values
// (Input.PerRunValues); a plan string that holds one is refused.
//
// A plan is data: objects, lists, strings, numbers, booleans, null, and
// file references. A file reference is the object {"_file": "path"} with no other key.
// A relative path is relative to the operator tree root; an absolute path inside the
// tree is stored relative to it. A path outside the tree (absolute, or relative with
// "..", or a link that resolves outside) is an error. The file need not exist yet.
// Not data, and refused: a string naming a Nix store path (a build result), a string
// with an unevaluated "${" interpolation, Terraform's unknown-value placeholder, what
// Nix prints for functions and thunks («lambda…», <LAMBDA>, <CODE> …), an object with
// "__functor" (a function), "_type" (mkIf/mkForce/mkOverride module values) or
// "type": "derivation". Errors name the place as "$.nodes.<node>.<path in that node's
// plan>", e.g. $.nodes.web01.applications.mastodon.key.
//
// # Digests
//
// The digest of a submission is the sha256 hex of the canonical JSON of the submission
// as read, before the merge: formatting and key order do not change it, any value does.
// A node plan digest is the sha256 hex of the plan's canonical text. ReadAndDigest and
// CheckUnchanged re-read a submission file at apply; a mismatch is a
// *DigestMismatchError that shows both digests.
//
// JSON is read strictly (Parse): valid UTF-8, one document, no key twice in an object.
package submission
