package holderval

import (
	"testing"
	"time"
)

func TestEncodeDecode(t *testing.T) {
	before := time.Now().Add(-time.Second)
	v := Decode(Encode("web-1:42"))
	if v.Holder != "web-1:42" || v.Since.Before(before) || v.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("round trip gave %+v", v)
	}
	for in, want := range map[string]string{
		"":                       NoData,
		"10.0.0.7":               "10.0.0.7",
		"evil\x1b[2Jname":        "evil\x1b[2Jname", // as it is: whoever prints it makes it printable
		`{"holder":"a\u001bb"}`:  "a\x1bb",          // as baton stored it: whoever prints it makes it printable
		`{"holder":"ok","since"`: `{"holder":"ok","since"`,
	} {
		if got := Decode([]byte(in)).Holder; got != want {
			t.Errorf("Decode(%q).Holder = %q, want %q", in, got, want)
		}
	}
}
