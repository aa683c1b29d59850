package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// tfGroupSettings are the roster keys modules/tf also takes for the whole group, as a
// variable of the same name in its local.settings: a node's own value wins. (build and
// timings are group-wide too, handed on their own way below.)
var tfGroupSettings = []string{"strict", "activation", "secret_chain", "loop_budgets"}

// providerBlocks name the resource's block of each list of objects a roster entry has.
var providerBlocks = map[string]string{"checks": "check", "probes": "probe"}

// rosterNodeSwitch is modules/tf/wave's fediversity_node_switch, made from a roster's
// node entry: every key of the entry is handed to the resource (the node's SSH settings
// in its ssh block, unless the entry names an Incus instance), the node's own value
// over the group's. The roster and fediversity_node_switch take the same keys
// (TestRosterAndNodeSwitchTakeTheSameArguments), so a key the node spec gains reaches
// the resource here on the next `make generate`.
func rosterNodeSwitch() string {
	var sshType, specType reflect.Type
	for i := 0; i < rosterNode.NumField(); i++ {
		switch f := rosterNode.Field(i); f.Type {
		case reflect.TypeOf(nodespec.SSH{}):
			sshType = f.Type
		case reflect.TypeOf(nodespec.Spec{}):
			specType = f.Type
		}
	}
	if sshType == nil || specType == nil {
		panic("modulegen: a roster's node entry no longer embeds nodespec.SSH and nodespec.Spec")
	}
	var attrs, blocks strings.Builder
	for _, f := range jsonFields(specType) {
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case f.Name == "toplevel":
			fmt.Fprintf(&attrs, "# The last good system replaces the configured toplevel (the plan sets it).\n")
			fmt.Fprintf(&attrs, "toplevel = var.settings.deploy == \"last-good\" ? null : each.value.toplevel\n")
		case f.Name == "build":
			fmt.Fprintf(&blocks, "\n# A prebuilt toplevel, or the node's build, or the group's (var.build).\n")
			fmt.Fprintf(&blocks, "dynamic \"build\" {\nfor_each = each.value.toplevel == null ? [each.value.build != null ? each.value.build : var.settings.build] : []\ncontent {\n")
			writeContent(&blocks, "build", ft)
			blocks.WriteString("}\n}\n")
		case f.Name == "timings":
			fmt.Fprintf(&blocks, "\n# The node's own timings over the group's (var.timings).\ntimings {\n")
			for _, t := range deploybody.TimingTable {
				if t.UsedByObject(deploybody.ObjectNodeSwitch) {
					fmt.Fprintf(&blocks, "%s = try(each.value.timings[%q], var.settings.timings.%s)\n", t.Name, t.Name, t.Name)
				}
			}
			blocks.WriteString("}\n")
		case ft.Kind() == reflect.Struct:
			blocks.WriteString("\n")
			writeBlock(&blocks, "each", f.Name, ft)
		case isObjectList(f.Type):
			blocks.WriteString("\n")
			writeListBlock(&blocks, "each", f.Name, ft.Elem())
		case slices.Contains(tfGroupSettings, f.Name):
			fmt.Fprintf(&attrs, "%s = each.value.%s != null ? each.value.%s : var.settings.%s\n", f.Name, f.Name, f.Name, f.Name)
		default:
			fmt.Fprintf(&attrs, "%s = each.value.%s\n", f.Name, f.Name)
		}
	}
	var b strings.Builder
	b.WriteString(`# modules/tf's deploy of one node, made from a roster's node entry (var.nodes): every
# key of the entry is handed to fediversity_node_switch, the node's own value over the
# group's (local.settings).
resource "fediversity_node_switch" "node" {
for_each = var.nodes

node = each.key
node_plan = var.node_plans[each.key]
submission_digest = var.submission_digest
submission_file = var.submission_file
deploy = var.settings.deploy
`)
	b.WriteString(attrs.String())
	b.WriteString("\n# The transport: SSH (the entry's top-level keys) unless the entry names an Incus instance.\n")
	b.WriteString("dynamic \"ssh\" {\nfor_each = each.value.incus == null ? [each.value] : []\ncontent {\n")
	writeContent(&b, "ssh", sshType)
	b.WriteString("}\n}\n")
	b.WriteString(blocks.String())
	b.WriteString("}\n")
	return b.String()
}

// writeBlock writes the dynamic block name of an optional object iter.value.name.
func writeBlock(b *strings.Builder, iter, name string, t reflect.Type) {
	fmt.Fprintf(b, "dynamic %q {\nfor_each = %s.value.%s == null ? [] : [%s.value.%s]\ncontent {\n", name, iter, name, iter, name)
	writeContent(b, name, t)
	b.WriteString("}\n}\n")
}

// writeListBlock writes one block per element of the list of objects iter.value.name.
func writeListBlock(b *strings.Builder, iter, name string, t reflect.Type) {
	block, ok := providerBlocks[name]
	if !ok {
		panic(fmt.Sprintf("modulegen: the roster's list %q has no fediversity_node_switch block: add it to providerBlocks", name))
	}
	fmt.Fprintf(b, "dynamic %q {\nfor_each = %s.value.%s\ncontent {\n", block, iter, name)
	writeContent(b, block, t)
	b.WriteString("}\n}\n")
}

// writeContent writes a block's arguments: each field of t, from the iterator iter.
func writeContent(b *strings.Builder, iter string, t reflect.Type) {
	older := map[string]string{}
	for _, f := range jsonFields(t) {
		if newer, ok := olderNames[f.Name]; ok {
			older[newer] = f.Name
		}
	}
	var nested strings.Builder
	for _, f := range jsonFields(t) {
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case olderNames[f.Name] != "":
			// Handed on as its newer name.
		case ft.Kind() == reflect.Struct:
			nested.WriteString("\n")
			writeBlock(&nested, iter, f.Name, ft)
		case isObjectList(f.Type):
			nested.WriteString("\n")
			writeListBlock(&nested, iter, f.Name, ft.Elem())
		case older[f.Name] != "":
			o := older[f.Name]
			fmt.Fprintf(b, "%s = %s.value.%s != null ? %s.value.%s : %s.value.%s\n", f.Name, iter, f.Name, iter, f.Name, iter, o)
		default:
			fmt.Fprintf(b, "%s = %s.value.%s\n", f.Name, iter, f.Name)
		}
	}
	b.WriteString(nested.String())
}
