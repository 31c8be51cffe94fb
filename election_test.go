package baton_test

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestRunScheduler_OutageThenLeadsAgain: the README's election loop leads
// again after an outage of the lock service that outlasts its lease and a
// campaign's request timeout. Before, the campaign that found etcd
// unreachable (ErrUnavailable) ended the loop, and the replica never led
// again.
func TestRunScheduler_OutageThenLeadsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: waits out a lease and a request timeout")
	}
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(etcdEndpoint, "http://"))
	locker, err := etcd.New(testsvc.Client(t, "http://"+proxy.Addr()), baton.WithTTL(2*time.Second), baton.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	terms := make(chan baton.Token)
	done := make(chan error, 1)
	go func() {
		done <- runScheduler(ctx, locker, func(ctx context.Context, token baton.Token) error {
			select {
			case terms <- token:
			case <-ctx.Done():
			}
			<-ctx.Done()
			return nil
		})
	}()
	lead := func() baton.Token {
		t.Helper()
		select {
		case tok := <-terms:
			return tok
		case err := <-done:
			t.Fatalf("runScheduler returned: %v", err)
		case <-ctx.Done():
			t.Fatal("no term within 60s")
		}
		return 0
	}
	first := lead()
	// Cut off for the lease (2s) and then some: the term ends, and the
	// campaigns after it get no answer within their 500ms.
	proxy.Block()
	proxy.Cut()
	time.Sleep(4 * time.Second)
	proxy.Unblock()
	if again := lead(); again <= first {
		t.Fatalf("token %d after the outage, %d before", again, first)
	}
	cancel()
	<-done
}

// TestREADME_GoSnippetsAreExamples: every Go block of the README is, line
// for line, in example_test.go, where it is compiled and run (comment
// lines aside: the README's blocks leave some out).
func TestREADME_GoSnippetsAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	trim := func(s string) string {
		var out []string
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "//") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	examples := trim(string(ex))
	blocks := strings.Split(string(readme), "```go\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block")
	}
	for _, b := range blocks {
		code, _, _ := strings.Cut(b, "```")
		if !strings.Contains(examples, trim(code)) {
			t.Errorf("README's Go block is not in example_test.go:\n%s", code)
		}
	}
}
