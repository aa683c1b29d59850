package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

var hclPos = hcl.InitialPos

// rosterNode is a roster's node entry: the type whose JSON keys the modules' nodes take.
var rosterNode = reflect.TypeOf(fleet.RosterNode{})

// jsonField is one field of a JSON struct type.
type jsonField struct {
	Name string
	Type reflect.Type
	// Required: the JSON form has no omitempty (a nested object's name, argv, host).
	Required bool
}

// jsonFields are t's fields by their JSON names, in order, those of embedded structs at
// t's own level.
func jsonFields(t reflect.Type) []jsonField {
	var fields []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			fields = append(fields, jsonFields(f.Type)...)
			continue
		}
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fields = append(fields, jsonField{Name: name, Type: f.Type, Required: !slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return fields
}

// hclType is the Terraform type of a Go type's JSON form. A struct's fields are optional
// unless required.
func hclType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return hclType(t.Elem())
	case reflect.Struct:
		var b strings.Builder
		b.WriteString("object({\n")
		for _, f := range jsonFields(t) {
			if f.Required {
				fmt.Fprintf(&b, "%s = %s\n", f.Name, hclType(f.Type))
			} else {
				fmt.Fprintf(&b, "%s = optional(%s)\n", f.Name, hclType(f.Type))
			}
		}
		b.WriteString("})")
		return b.String()
	case reflect.Slice:
		return "list(" + hclType(t.Elem()) + ")"
	case reflect.Map:
		return "map(" + hclType(t.Elem()) + ")"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "number"
	}
	panic("modulegen: no Terraform type for " + t.String())
}

// isObjectList tells a list of objects (checks, probes): a node entry without one has an
// empty list, which a dynamic block can iterate.
func isObjectList(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct
}

// olderNames are roster keys that are older names of another key of the same object:
// the roster takes either, the provider only the newer (the module hands it the one
// given). A node entry giving both is refused, as the roster refuses it.
var olderNames = map[string]string{"body_pattern": "body_regexp"}

// nodesType is the type of m's var.nodes: a map of node entries with the roster keys m
// takes, every one optional at the entry's level (SSH's host is absent on an Incus
// node), then m's own keys; and the validations the roster's keys need.
func nodesType(m module) (string, []validation, error) {
	var b strings.Builder
	var validations []validation
	b.WriteString("map(object({\n")
	all := slices.Contains(m.RosterKeys, allRosterKeys)
	taken := map[string]bool{}
	for _, f := range jsonFields(rosterNode) {
		if !all && !slices.Contains(m.RosterKeys, f.Name) {
			continue
		}
		taken[f.Name] = true
		if isObjectList(f.Type) {
			fmt.Fprintf(&b, "%s = optional(%s, [])\n", f.Name, hclType(f.Type))
		} else {
			fmt.Fprintf(&b, "%s = optional(%s)\n", f.Name, hclType(f.Type))
		}
		if isObjectList(f.Type) {
			for _, g := range jsonFields(f.Type.Elem()) {
				if newer, ok := olderNames[g.Name]; ok {
					both := fmt.Sprintf("[for n, v in var.nodes : n if anytrue([for x in v.%s : x.%s != null && x.%s != null])]", f.Name, g.Name, newer)
					validations = append(validations, validation{
						Condition: fmt.Sprintf("length(%s) == 0", both),
						Message: fmt.Sprintf("nodes: ${join(\", \", %s)}: a %s takes %s or %s (its older name), not both; remove %s.",
							both, providerBlocks[f.Name], newer, g.Name, g.Name),
					})
				}
			}
		}
	}
	for _, k := range m.RosterKeys {
		if k != allRosterKeys && !taken[k] {
			return "", nil, fmt.Errorf("modules/%s takes the roster key %q, which a roster's node entry does not have", m.Name, k)
		}
	}
	if len(m.OwnKeys) > 0 {
		fmt.Fprintf(&b, "# modules/%s's own keys.\n", m.Name)
	}
	for _, k := range m.OwnKeys {
		if taken[k.Name] {
			return "", nil, fmt.Errorf("modules/%s: its own key %q is a roster key", m.Name, k.Name)
		}
		fmt.Fprintf(&b, "%s = %s\n", k.Name, k.Type)
	}
	b.WriteString("}))")
	return b.String(), validations, nil
}

// buildType is the type of var.build, a node's build (nodespec.Build).
func buildType() string { return hclType(reflect.TypeOf(nodespec.Build{})) }

// moduleTimings are the timing table's rows that the objects of m read.
func moduleTimings(m module) []deploybody.Timing {
	var rows []deploybody.Timing
	for _, t := range deploybody.TimingTable {
		for _, o := range m.TimingObjects {
			if t.UsedByObject(o) {
				rows = append(rows, t)
				break
			}
		}
	}
	return rows
}

// timingsType is the type of m's var.timings: a Go duration per timing its objects read.
func timingsType(m module) string {
	var b strings.Builder
	b.WriteString("object({\n")
	for _, t := range moduleTimings(m) {
		fmt.Fprintf(&b, "%s = optional(string)\n", t.Name)
	}
	for _, k := range m.OwnTimings {
		fmt.Fprintf(&b, "%s = %s\n", k.Name, k.Type)
	}
	b.WriteString("})")
	return b.String()
}
