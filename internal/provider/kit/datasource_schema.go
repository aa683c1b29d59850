package kit

// Data sources read the same nodes the resources change, through the same `ssh {}`,
// `incus {}` and `timings {}` blocks and the same verdict object. The framework gives
// data sources their own schema types (no plan modifiers, no defaults), so the blocks
// are converted from the resources' one definition here rather than written twice.

import (
	"fmt"

	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

// DataSourceBlock is the data-source form of a resource block: the same attributes,
// documentation and validators; plan modifiers and defaults (which a data source has
// not) are dropped.
func DataSourceBlock(b rschema.Block) dschema.Block {
	switch b := b.(type) {
	case rschema.SingleNestedBlock:
		return dschema.SingleNestedBlock{
			MarkdownDescription: b.MarkdownDescription, DeprecationMessage: b.DeprecationMessage, Validators: b.Validators,
			Attributes: DataSourceAttributes(b.Attributes), Blocks: DataSourceBlocks(b.Blocks),
		}
	case rschema.ListNestedBlock:
		return dschema.ListNestedBlock{
			MarkdownDescription: b.MarkdownDescription, DeprecationMessage: b.DeprecationMessage, Validators: b.Validators,
			NestedObject: dschema.NestedBlockObject{
				Attributes: DataSourceAttributes(b.NestedObject.Attributes), Blocks: DataSourceBlocks(b.NestedObject.Blocks),
				Validators: b.NestedObject.Validators,
			},
		}
	}
	// A programming error, found by the provider's schema test on the first run.
	panic(fmt.Sprintf("kit.DataSourceBlock: no data-source form of %T", b))
}

// DataSourceBlocks converts each block (DataSourceBlock).
func DataSourceBlocks(blocks map[string]rschema.Block) map[string]dschema.Block {
	return convertEach(blocks, DataSourceBlock)
}

// DataSourceAttributes converts each attribute (DataSourceAttribute).
func DataSourceAttributes(attrs map[string]rschema.Attribute) map[string]dschema.Attribute {
	return convertEach(attrs, DataSourceAttribute)
}

// convertEach is m with convert applied to each value (nil stays nil: the framework
// reads an absent map and an empty one alike, but a nil keeps the schemas equal).
func convertEach[R, D any](m map[string]R, convert func(R) D) map[string]D {
	if m == nil {
		return nil
	}
	out := make(map[string]D, len(m))
	for name, v := range m {
		out[name] = convert(v)
	}
	return out
}

// DataSourceAttribute is the data-source form of a resource attribute (see
// DataSourceBlock). An attribute with a default becomes optional and computed: the data
// source applies the default itself.
func DataSourceAttribute(a rschema.Attribute) dschema.Attribute {
	switch a := a.(type) {
	case rschema.StringAttribute:
		return dschema.StringAttribute{Required: a.Required, Optional: a.Optional, Computed: a.Computed || a.Default != nil, Sensitive: a.Sensitive,
			MarkdownDescription: a.MarkdownDescription, DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	case rschema.Int64Attribute:
		return dschema.Int64Attribute{Required: a.Required, Optional: a.Optional, Computed: a.Computed || a.Default != nil, Sensitive: a.Sensitive,
			MarkdownDescription: a.MarkdownDescription, DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	case rschema.BoolAttribute:
		return dschema.BoolAttribute{Required: a.Required, Optional: a.Optional, Computed: a.Computed || a.Default != nil, Sensitive: a.Sensitive,
			MarkdownDescription: a.MarkdownDescription, DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	case rschema.ListAttribute:
		return dschema.ListAttribute{ElementType: a.ElementType, Required: a.Required, Optional: a.Optional, Computed: a.Computed || a.Default != nil,
			Sensitive: a.Sensitive, MarkdownDescription: a.MarkdownDescription, DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	case rschema.MapAttribute:
		return dschema.MapAttribute{ElementType: a.ElementType, Required: a.Required, Optional: a.Optional, Computed: a.Computed || a.Default != nil,
			Sensitive: a.Sensitive, MarkdownDescription: a.MarkdownDescription, DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	case rschema.SingleNestedAttribute:
		return dschema.SingleNestedAttribute{Attributes: DataSourceAttributes(a.Attributes), Required: a.Required, Optional: a.Optional,
			Computed: a.Computed || a.Default != nil, Sensitive: a.Sensitive, MarkdownDescription: a.MarkdownDescription,
			DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	case rschema.ListNestedAttribute:
		return dschema.ListNestedAttribute{NestedObject: dschema.NestedAttributeObject{Attributes: DataSourceAttributes(a.NestedObject.Attributes)},
			Required: a.Required, Optional: a.Optional, Computed: a.Computed || a.Default != nil, Sensitive: a.Sensitive,
			MarkdownDescription: a.MarkdownDescription, DeprecationMessage: a.DeprecationMessage, Validators: a.Validators}
	}
	panic(fmt.Sprintf("kit.DataSourceAttribute: no data-source form of %T", a))
}
