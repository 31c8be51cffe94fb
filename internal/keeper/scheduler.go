package keeper

import (
	"container/heap"
	"sync"
	"time"
)

// Scheduler runs the ticks of many Keepers on one runtime timer. A backend
// that starts a Keeper per hold owns one, so that taking and freeing a lock
// creates no timer: the timer stays armed at the earliest tick, and a hold
// whose first renewal comes later, as every new one does, only joins the
// queue. That matters because a runtime timer created to fire before every
// other one pending on its P wakes an idle thread of the Go scheduler
// (runtime.wakeNetPoller), which on a 2-core machine delays the lock
// service's answer as much as the timer's own work costs several times
// over.
//
// A Scheduler runs no goroutine between ticks and needs no closing: once
// its queue is empty, its timer fires at most once more and finds nothing
// to do. Its methods are safe for concurrent use. Its timer belongs to the
// testing/synctest bubble (or the outside) that NewScheduler ran in, so a
// test starts its Keepers where it made the Scheduler.
type Scheduler struct {
	mu    sync.Mutex
	q     ticks
	timer *time.Timer
	armed time.Time // when timer fires next; zero when it is not armed
}

// NewScheduler returns a Scheduler with nothing queued.
func NewScheduler() *Scheduler {
	s := &Scheduler{}
	s.timer = time.AfterFunc(time.Hour, s.fire)
	s.timer.Stop()
	return s
}

// tick is one queued call.
type tick struct {
	at time.Time
	f  func()
	i  int // index in the queue; -1 once taken out
}

// after queues f to run in its own goroutine at at.
func (s *Scheduler) after(at time.Time, f func()) *tick {
	t := &tick{at: at, f: f}
	s.mu.Lock()
	defer s.mu.Unlock()
	heap.Push(&s.q, t)
	if s.armed.IsZero() || at.Before(s.armed) {
		s.armed = at
		s.timer.Reset(time.Until(at))
	}
	return t
}

// cancel takes t out of the queue and reports whether it was still there,
// that is, whether f will never run. The timer stays armed: it fires, finds
// nothing due and re-arms for the next tick, which costs less than
// stopping it and arming it again for the next hold.
func (s *Scheduler) cancel(t *tick) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.i < 0 {
		return false
	}
	heap.Remove(&s.q, t.i)
	return true
}

// fire is the timer's callback: it starts every tick that is due and arms
// the timer for the next one.
func (s *Scheduler) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for len(s.q) > 0 && !s.q[0].at.After(now) {
		t := heap.Pop(&s.q).(*tick)
		go t.f()
	}
	s.armed = time.Time{}
	if len(s.q) > 0 {
		s.armed = s.q[0].at
		s.timer.Reset(time.Until(s.armed))
	}
}

// ticks is a min-heap of ticks by time (container/heap).
type ticks []*tick

func (q ticks) Len() int           { return len(q) }
func (q ticks) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q ticks) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].i, q[j].i = i, j
}
func (q *ticks) Push(x any) {
	t := x.(*tick)
	t.i = len(*q)
	*q = append(*q, t)
}
func (q *ticks) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.i = -1
	*q = old[:len(old)-1]
	return t
}
