package failkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// TestUnavailable: the caller's cancellation wins; a timeout names its
// bound; anything else is the service's failure, naming where and what.
func TestUnavailable(t *testing.T) {
	errNet := errors.New("connection refused")
	err := Unavailable(context.Background(), "etcd://h", "delete k", errNet, false, time.Second)
	if !errors.Is(err, baton.ErrUnavailable) || !errors.Is(err, errNet) || err.Error() != "etcd://h: delete k: connection refused" {
		t.Errorf("failure: %v", err)
	}
	err = Unavailable(context.Background(), "etcd://h", "delete k", context.DeadlineExceeded, true, time.Second)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "delete k: no answer within 1s") {
		t.Errorf("timeout: %v", err)
	}
	cause := errors.New("caller's reason")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := Unavailable(ctx, "etcd://h", "delete k", context.Canceled, false, time.Second); err != cause {
		t.Errorf("cancelled: %v; want the ctx's cause", err)
	}
}
