package backends_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backends"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/urlparam"
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

// TestDocumentedParameters ties the "URL parameters" row of
// docs/backends.md to the code: for each backend, the parameters named
// there (outside parentheses) are those its Open lists when it refuses an
// unknown one, and for PostgreSQL, whose other parameters go to pgx, the
// ones baton takes.
func TestDocumentedParameters(t *testing.T) {
	md, err := os.ReadFile("../docs/backends.md")
	if err != nil {
		t.Fatal(err)
	}
	var cells []string
	for line := range strings.Lines(string(md)) {
		if strings.HasPrefix(line, "| URL parameters") {
			cells = strings.Split(strings.Trim(strings.TrimSpace(line), "|"), " | ")
		}
	}
	columns := []string{"etcd", "zk", "postgres", "redis", "redlock"} // the table's, in its order
	if len(cells) != 1+len(columns) {
		t.Fatalf("docs/backends.md: the URL parameters row has %d cells, want %d", len(cells), 1+len(columns))
	}
	parens, names := regexp.MustCompile(`\([^)]*\)`), regexp.MustCompile("`([a-z-]+)`")
	documented := func(cell string) []string {
		var out []string
		for _, m := range names.FindAllStringSubmatch(parens.ReplaceAllString(cell, ""), -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	unknown := map[string]string{
		"etcd":    "etcd://127.0.0.1:1/?bogus=1",
		"zk":      "zk://127.0.0.1:1/?bogus=1",
		"redis":   "redis://127.0.0.1:1/?bogus=1",
		"redlock": "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/?bogus=1",
	}
	for i, scheme := range columns {
		doc := documented(cells[1+i])
		var known []string
		if scheme == "postgres" {
			known = slices.Clone(urlparam.Postgres)
		} else {
			_, err := backends.Open(context.Background(), unknown[scheme])
			_, list, ok := strings.Cut(errString(err), "; known: ")
			if !ok {
				t.Errorf("%s: Open(%q) = %v; want an error listing the known parameters", scheme, unknown[scheme], err)
				continue
			}
			known = strings.Split(list, ", ")
		}
		slices.Sort(known)
		if !slices.Equal(doc, known) {
			t.Errorf("docs/backends.md documents %v for %s; its Open knows %v", doc, scheme, known)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestObservable ties Observable to the backends that build without a
// connection: Redlock's Locker refuses to observe (errors.ErrUnsupported),
// Redis's can. The others' observers have tests of their own.
func TestObservable(t *testing.T) {
	for scheme := range backends.All() {
		if got, want := backends.Observable(scheme), scheme != "redlock"; got != want {
			t.Errorf("Observable(%q) = %v, want %v", scheme, got, want)
		}
	}
	if backends.Observable("mysql") {
		t.Error("Observable of a scheme baton does not know")
	}
	unconnected := func(port int) goredis.UniversalClient {
		return goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	}
	rl, err := redlock.New([]goredis.UniversalClient{unconnected(1), unconnected(2), unconnected(3)})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if _, err := rl.Observe(context.Background(), "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("redlock Observe: %v; want errors.ErrUnsupported, as Observable says", err)
	}
	rs, err := redis.New(unconnected(1))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, ok := rs.Backend().(baton.Observer); !ok {
		t.Error("redis's backend is not a baton.Observer, and Observable says it is")
	}
}
