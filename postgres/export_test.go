package postgres

import (
	"time"

	"github.com/baton-go/baton"
)

// SetClock replaces the client clock of l's backend: the only clock the
// client reads for a value it sends (holder_clock). Call it before l is
// used.
func SetClock(l *baton.Locker, now func() time.Time) { l.Backend().(*backend).now = now }

// Attempts returns how many acquisition statements l's backend has sent.
func Attempts(l *baton.Locker) int64 { return l.Backend().(*backend).attempts.Load() }

// Channel returns l's NOTIFY channel.
func Channel(l *baton.Locker) string { return l.Backend().(*backend).channel }

// Deaf makes l's listener drop every NOTIFY (true) or deliver them again.
func Deaf(l *baton.Locker, deaf bool) { l.Backend().(*backend).deaf.Store(deaf) }
