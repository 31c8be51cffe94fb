package zapslog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	lg := New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lg.Info("quiet", zap.String("k", "v"))
	lg.With(zap.String("member", "m1")).Warn("peer unreachable", zap.Int("port", 2380))
	out := buf.String()
	if strings.Contains(out, "quiet") {
		t.Errorf("info logged at warn level: %q", out)
	}
	for _, want := range []string{"level=WARN", `msg="peer unreachable"`, "member=m1", "port=2380"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}
