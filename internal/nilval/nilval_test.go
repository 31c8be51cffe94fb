package nilval

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	var ifc interface{ String() string }
	for _, tc := range []struct {
		v    any
		want string
	}{{nil, "nil"}, {ifc, "nil"}, {(*strings.Builder)(nil), "nil *strings.Builder"}, {map[string]int(nil), "nil map[string]int"}, {(func())(nil), "nil func()"}} {
		if what, isNil := Of(tc.v); !isNil || what != tc.want {
			t.Errorf("Of(%#v) = %q, %v; want %q, true", tc.v, what, isNil, tc.want)
		}
	}
	for _, v := range []any{&strings.Builder{}, 0, "", struct{}{}, map[string]int{}} {
		if what, isNil := Of(v); isNil {
			t.Errorf("Of(%#v) = %q, true; want false", v, what)
		}
	}
}
