package zk

import (
	"context"
	"errors"
	"testing"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// TestFail_SessionExpired: a request that failed because the session
// expired is a loss, and says which: both sentinels match.
func TestFail_SessionExpired(t *testing.T) {
	b := &backend{}
	err := b.fail(context.Background(), "acquire x", zkgo.ErrSessionExpired)
	if !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, ErrSessionExpired) {
		t.Errorf("fail(session expired) = %v; want it to match baton.ErrLeaseLost and zk.ErrSessionExpired", err)
	}
}
