package etcdserver

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestCountNames(t *testing.T) {
	for in, want := range map[string]int{
		"default=http://127.0.0.1:2380":                                  1,
		"m1=http://a:2380,m2=http://b:2380,m3=http://c:2380":             3,
		"m1=http://a:2380,m1=http://a2:2380,m2=http://b:2380":            2, // m1 has two peer URLs
		" m1=http://a:2380, m2=http://b:2380":                            2,
		"m1=http://a:2380,m2=http://b:2380,m3=http://c:2380,m3=http://d": 3,
	} {
		if got := countNames(in); got != want {
			t.Errorf("countNames(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestMuteCore(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	muted := &atomic.Bool{}
	lg := zap.New(muteCore{obs, muted}).With(zap.String("member", "m1"))
	lg.Info("before")
	muted.Store(true)
	lg.Error("closed listener")
	lg.With(zap.Int("n", 1)).Warn("after, derived")
	if got := logs.AllUntimed(); len(got) != 1 || got[0].Message != "before" || got[0].ContextMap()["member"] != "m1" {
		t.Fatalf("logged %v; want only the entry before the mute, with its fields", got)
	}
}
