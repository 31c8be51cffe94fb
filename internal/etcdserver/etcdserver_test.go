package etcdserver

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

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
