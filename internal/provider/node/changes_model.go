package node

// The `changes` attribute of fediversity_node_switch: what the last deploy changed
// between the system the node ran before and the new toplevel.

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

var changesAttrTypes = map[string]attr.Type{
	"previous_system":        types.StringType,
	"previous_closure_known": types.BoolType,
	"paths_added":            stringList,
	"paths_removed":          stringList,
	"packages_added":         stringList,
	"packages_removed":       stringList,
	"packages_changed":       stringList,
	"paths_copied":           types.Int64Type,
	"bytes_copied":           types.Int64Type,
	"units_added":            stringList,
	"units_removed":          stringList,
	"units_changed":          stringList,
	"units_not_restarted":    stringList,
	"counts":                 types.MapType{ElemType: types.Int64Type},
	"notes":                  stringList,
}

var changesAttributeDocs = map[string]string{
	"previous_system":        "What `/run/current-system` pointed at before the switch (null when the node ran no NixOS system).",
	"previous_closure_known": "The deployer's Nix store holds the previous system's closure, so removed paths and the versions they replace are known.",
	"paths_added":            "Store paths in the new closure and not in the previous one (when the previous closure is unknown: the paths the node lacked). Like every list here, at most the first " + fmt.Sprint(deploybody.ChangesListLimit) + " (sorted); `counts` has how many there are.",
	"paths_removed":          "Store paths of the previous closure that the new one no longer holds; null when the previous closure is unknown.",
	"packages_added":         "Packages (`name version`) only the new closure has.",
	"packages_removed":       "Packages only the previous closure had; null when it is unknown.",
	"packages_changed":       "Packages in both, as `name: old → new` (or `name: version rebuilt` when only the hash changed); null when unknown.",
	"paths_copied":           "How many store paths the copy sent.",
	"bytes_copied":           "How many bytes the copy sent.",
	"units_added":            "Unit files the new toplevel has and the previous system had not; null when the previous system's units were unread.",
	"units_removed":          "Unit files the previous system had and the new toplevel has not; null when unread.",
	"units_changed":          "Units in both whose file or drop-ins (`<unit>.d/*.conf`, how NixOS configures upstream units) differ; null when unread.",
	"units_not_restarted":    "Changed units the switch left running their old code, as `<unit>: changed, not restarted (restartIfChanged = false)` (or `RefuseManualStop = true`, `X-OnlyManualStart = true`, or no reason when the unit file gives none): `switch-to-configuration` does not restart them. Empty after a reboot.",
	"counts": "The full length of every list that is known, by its name (`paths_added`, …). Each list keeps only its first " +
		fmt.Sprint(deploybody.ChangesListLimit) + " names (a deploy can add thousands of paths); a list that was cut is longer here, and `notes` says so.",
	"notes": "What could not be known, and why; and which lists were cut.",
}

func changesSchemaAttribute() schema.SingleNestedAttribute {
	attrs := map[string]schema.Attribute{}
	for name, t := range changesAttrTypes {
		doc := changesAttributeDocs[name]
		switch t {
		case types.StringType:
			attrs[name] = schema.StringAttribute{Computed: true, MarkdownDescription: doc}
		case types.BoolType:
			attrs[name] = schema.BoolAttribute{Computed: true, MarkdownDescription: doc}
		case types.Int64Type:
			attrs[name] = schema.Int64Attribute{Computed: true, MarkdownDescription: doc}
		case changesAttrTypes["counts"]:
			attrs[name] = schema.MapAttribute{Computed: true, ElementType: types.Int64Type, MarkdownDescription: doc}
		default:
			attrs[name] = schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: doc}
		}
	}
	return schema.SingleNestedAttribute{Computed: true, Attributes: attrs,
		MarkdownDescription: "What the last deploy changed, from data the deploy reads anyway (no extra round trip): store paths and packages " +
			"added and removed, bytes copied, units added, removed and changed, and the changed units the switch did not restart. The verdict's `report` shows the same summary. " +
			"Null until a deploy reached its report."}
}

// nullableList is a list value, null for a nil slice (unknown), empty for an empty one.
func nullableList(items []string) types.List {
	if items == nil {
		return types.ListNull(types.StringType)
	}
	return listOrNull(items, false)
}

func changesValue(c *deploybody.Changes) types.Object {
	if c == nil {
		return types.ObjectNull(changesAttrTypes)
	}
	return types.ObjectValueMust(changesAttrTypes, map[string]attr.Value{
		"previous_system":        kit.StringOrNull(c.PreviousSystem),
		"previous_closure_known": types.BoolValue(c.PreviousClosureKnown),
		"paths_added":            nullableList(c.PathsAdded),
		"paths_removed":          nullableList(c.PathsRemoved),
		"packages_added":         nullableList(c.PackagesAdded),
		"packages_removed":       nullableList(c.PackagesRemoved),
		"packages_changed":       nullableList(c.PackagesChanged),
		"paths_copied":           types.Int64Value(int64(c.PathsCopied)),
		"bytes_copied":           types.Int64Value(c.BytesCopied),
		"units_added":            nullableList(c.UnitsAdded),
		"units_removed":          nullableList(c.UnitsRemoved),
		"units_changed":          nullableList(c.UnitsChanged),
		"units_not_restarted":    nullableList(c.UnitsNotRestarted),
		"counts":                 countsValue(c.Counts),
		"notes":                  listOrNull(c.Notes, false),
	})
}

// countsValue is the lists' full lengths as a map; null when none is known.
func countsValue(counts map[string]int) types.Map {
	if len(counts) == 0 {
		return types.MapNull(types.Int64Type)
	}
	vals := map[string]attr.Value{}
	for name, n := range counts {
		vals[name] = types.Int64Value(int64(n))
	}
	return types.MapValueMust(types.Int64Type, vals)
}
