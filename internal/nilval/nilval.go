// Package nilval tells a nil handle a caller passed (a nil interface, or
// a nil pointer, map, slice, func or channel in one), on which every
// method would panic, so that a library can refuse it with an error.
package nilval

import (
	"fmt"
	"reflect"
)

// Of reports whether v is nil: the nil interface, or a nil value of a
// kind that can be nil. what shows it in an error: "nil", or "nil
// *sql.Tx".
func Of(v any) (what string, isNil bool) {
	if v == nil {
		return "nil", true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return fmt.Sprintf("nil %T", v), true
		}
	}
	return "", false
}
