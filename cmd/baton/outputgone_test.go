package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchOutput: the watch calls gone once a pipe's reader has gone, and
// not before; stop ends it, also when nothing happened; a file is not
// watched.
func TestWatchOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gone := make(chan struct{})
	stop := watchOutput(outputWriter{w}, func() { close(gone) })
	defer stop()
	select {
	case <-gone:
		t.Fatal("gone called while the pipe still has its reader")
	case <-time.After(100 * time.Millisecond):
	}
	_ = r.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("gone not called within 10s of the reader's close")
	}
	stop()

	// Stopped with the reader still there: stop returns, gone is never called.
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	defer w2.Close()
	watchOutput(w2, func() { t.Error("gone called for a pipe whose reader is there") })()

	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	watchOutput(f, func() { t.Error("gone called for a file") })()
}
