package backends_test

import (
	"reflect"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backends"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/postgres"
	"github.com/baton-go/baton/redis"
	"github.com/baton-go/baton/redlock"
	"github.com/baton-go/baton/zk"
)

// TestUnfenced ties Unfenced to the backends' types: a scheme is unfenced
// exactly when its package's constructor returns a plain *baton.Locker, not
// a *baton.FencedLocker. A scheme added to All must be added here, and so
// to Unfenced when it gives no tokens.
func TestUnfenced(t *testing.T) {
	constructors := map[string]any{
		"etcd":       etcd.New,
		"postgres":   postgres.New,
		"postgresql": postgres.New,
		"redis":      redis.New,
		"redlock":    redlock.New,
		"zk":         zk.New,
	}
	fencedType := reflect.TypeFor[*baton.FencedLocker]()
	plainType := reflect.TypeFor[*baton.Locker]()
	for scheme := range backends.All() {
		newFn, ok := constructors[scheme]
		if !ok {
			t.Errorf("scheme %q: no constructor listed in this test; add it, and to Unfenced if it gives no tokens", scheme)
			continue
		}
		switch out := reflect.TypeOf(newFn).Out(0); out {
		case fencedType:
			if backends.Unfenced(scheme) {
				t.Errorf("Unfenced(%q) = true, but its constructor returns %v", scheme, out)
			}
		case plainType:
			if !backends.Unfenced(scheme) {
				t.Errorf("Unfenced(%q) = false, but its constructor returns %v: a program would connect before refusing a fenced use", scheme, out)
			}
		default:
			t.Errorf("scheme %q: constructor returns %v, want %v or %v", scheme, out, fencedType, plainType)
		}
	}
	for _, s := range []string{"", "http", "mysql"} {
		if backends.Unfenced(s) {
			t.Errorf("Unfenced(%q) = true for a scheme baton does not know", s)
		}
	}
}
