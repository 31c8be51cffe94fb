package postgres_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/baton-go/baton/internal/testsvc"
	"go.uber.org/goleak"
)

// pg is the PostgreSQL server shared by this package's tests.
var pg testsvc.Postgres

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
