package submission

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/methods"
)

// Methods are the deployment methods of the catalog (internal/methods). A key of the
// submission named after one of them is that method's branch.
var Methods = methods.Names(methods.Catalog)

// raisedKeys are the values that move out of the picked method's branch.
var raisedKeys = []string{"applications", "domain", "email"}

func isMethod(name string) bool {
	_, ok := methods.Lookup(name)
	return ok
}

// deepMerge lays over on top of base: objects merge key by key, any other value of over
// (a list, a string, null …) replaces base's. Neither input is changed.
func deepMerge(base, over any) any {
	bo, bok := base.(map[string]any)
	oo, ook := over.(map[string]any)
	if !bok || !ook {
		return deepCopy(over)
	}
	out := deepCopy(bo).(map[string]any)
	for k, ov := range oo {
		if bv, ok := out[k]; ok {
			out[k] = deepMerge(bv, ov)
		} else {
			out[k] = deepCopy(ov)
		}
	}
	return out
}

// raiseBranch returns the submission with the applications, domain and email of the
// picked method's branch at the top level and every method branch removed. Values in
// the branch win over top-level ones (applications merge per application). Other keys
// of the picked branch go away with it; each is named in a warning.
func raiseBranch(sub map[string]any, method string, errs *Errors, warn func(string)) map[string]any {
	out := map[string]any{}
	for k, v := range sub {
		if !isMethod(k) {
			out[k] = deepCopy(v)
		}
	}
	raw, ok := sub[method]
	if !ok {
		return out
	}
	at := JoinKey("$", method)
	branch, ok := raw.(map[string]any)
	if !ok {
		errs.add(InSubmission, "", at, "the branch of the picked method is "+jsonKind(raw)+", not an object",
			`write it as an object such as {"applications": {…}, "domain": "…", "email": "…"}`)
		return out
	}
	for _, k := range raisedKeys {
		v, ok := branch[k]
		if !ok {
			continue
		}
		if k == "applications" {
			out[k] = deepMerge(out[k], v)
		} else {
			out[k] = deepCopy(v)
		}
	}
	var dropped []string
	for k := range branch {
		if !contains(raisedKeys, k) {
			dropped = append(dropped, JoinKey(at, k))
		}
	}
	sort.Strings(dropped)
	if len(dropped) > 0 {
		warn(fmt.Sprintf("The submission's branch of method %s holds %s; only applications, domain and email "+
			"are taken from a method branch, so these values are not deployed.", method, strings.Join(dropped, ", ")))
	}
	return out
}

// checkTopLevel checks the shape of the keys this package reads from a configuration
// document (the submission after raising, or the baked configuration).
func checkTopLevel(doc map[string]any, in, root string, errs *Errors) {
	for _, k := range []string{"domain", "email"} {
		if v, ok := doc[k]; ok {
			if _, isStr := v.(string); !isStr {
				errs.add(in, "", JoinKey(root, k), k+" is "+jsonKind(v)+", not a string", "")
			}
		}
	}
	raw, ok := doc["applications"]
	if !ok {
		return
	}
	appsAt := JoinKey(root, "applications")
	apps, ok := raw.(map[string]any)
	if !ok {
		errs.add(in, "", appsAt, "applications is "+jsonKind(raw)+", not an object",
			`write it as {"<application>": {"enable": true, …}, …}`)
		return
	}
	for _, name := range sortedKeys(apps) {
		at := JoinKey(appsAt, name)
		app, ok := apps[name].(map[string]any)
		if !ok {
			errs.add(in, "", at, "the application's entry is "+jsonKind(apps[name])+", not an object",
				`write it as {"enable": true, …}`)
			continue
		}
		if e, ok := app["enable"]; ok {
			if _, isBool := e.(bool); !isBool {
				errs.add(in, "", JoinKey(at, "enable"), "enable is "+jsonKind(e)+", not true or false", "")
			}
		}
	}
}

// mergeConfig merges the (raised) submission into the baked configuration. Every
// application the submission names is on only when the submission says "enable": true;
// an application the submission does not name keeps its baked entry.
func mergeConfig(baked, sub map[string]any) map[string]any {
	merged := map[string]any{}
	for k, v := range baked {
		if k != "applications" {
			merged[k] = deepCopy(v)
		}
	}
	for k, v := range sub {
		if k == "applications" {
			continue
		}
		merged[k] = deepMerge(merged[k], v)
	}
	apps := map[string]any{}
	if ba, ok := baked["applications"].(map[string]any); ok {
		for k, v := range ba {
			apps[k] = deepCopy(v)
		}
	}
	_, bakedHasApps := baked["applications"]
	if sa, ok := sub["applications"].(map[string]any); ok {
		for name, raw := range sa {
			sv, _ := raw.(map[string]any)
			app, _ := deepMerge(apps[name], sv).(map[string]any)
			if app == nil {
				app = map[string]any{}
			}
			enable, _ := sv["enable"].(bool)
			app["enable"] = enable
			apps[name] = app
		}
	}
	if bakedHasApps || len(apps) > 0 {
		merged["applications"] = apps
	}
	return merged
}

// appEnabled tells whether the merged configuration turns the application on.
func appEnabled(apps map[string]any, name string) bool {
	app, _ := apps[name].(map[string]any)
	on, _ := app["enable"].(bool)
	return on
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
