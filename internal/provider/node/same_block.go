package node

import (
	"fmt"
	"reflect"

	"github.com/hashicorp/terraform-plugin-framework/attr"
)

// sameBlock says whether a block holds the same values in the plan and in the state:
// both absent, or every field equal by the framework value's own Equal (which tells a
// null from an empty string, an unknown from either, and compares map and list
// elements as values). Block models are structs of framework values and pointers to
// nested block models; they are walked by reflection, so that a field added to a model
// is compared without being listed a second time.
func sameBlock[T any](a, b *T) bool {
	return sameValue(reflect.ValueOf(a), reflect.ValueOf(b))
}

func sameValue(a, b reflect.Value) bool {
	if v, ok := a.Interface().(attr.Value); ok {
		return v.Equal(b.Interface().(attr.Value))
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	// A model field of another kind (a Go slice, a plain string) would need its own
	// comparison; TestSameBlock walks every model this is called on.
	panic(fmt.Sprintf("sameBlock: field of type %s is neither a framework value nor a nested block", a.Type()))
}
