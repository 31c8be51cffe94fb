package asynclog

import (
	"context"
	"sync"
)

// queue holds up to Queue items for hand, which a goroutine of the queue's
// own calls with each in turn. The goroutine runs only while items wait.
// Past Queue, items are dropped and counted, and notice makes the item
// that says how many, queued before the next item that fits (or at flush).
type queue[T any] struct {
	hand   func(T)
	notice func(dropped int) T

	mu      sync.Mutex
	items   []T
	drained chan struct{} // not nil while drain runs; closed when it ends
	dropped int           // items dropped since the last that fitted
}

func newQueue[T any](hand func(T), notice func(dropped int) T) *queue[T] {
	return &queue[T]{hand: hand, notice: notice}
}

func (q *queue[T]) push(it T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped > 0 && len(q.items) < Queue-1 {
		q.items = append(q.items, q.count())
	}
	if q.dropped > 0 || len(q.items) >= Queue {
		q.dropped++
		return
	}
	q.items = append(q.items, it)
	q.start()
}

// count is notice's item for the items dropped; it counts them again from
// 0. The caller holds mu.
func (q *queue[T]) count() T {
	n := q.dropped
	q.dropped = 0
	return q.notice(n)
}

// start starts drain unless it runs. The caller holds mu.
func (q *queue[T]) start() {
	if q.drained == nil {
		q.drained = make(chan struct{})
		go q.drain(q.drained)
	}
}

// drain hands the queued items on, in order, until none is left, then
// closes drained.
func (q *queue[T]) drain(drained chan struct{}) {
	var zero T
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.drained = nil
			q.items = nil // let a burst's array go
			close(drained)
			q.mu.Unlock()
			return
		}
		it := q.items[0]
		q.items[0] = zero
		q.items = q.items[1:]
		q.mu.Unlock()
		q.hand(it)
	}
}

// flush waits for drain to end, or for ctx to, and returns
// context.Cause(ctx) then. The count of any items dropped comes last.
func (q *queue[T]) flush(ctx context.Context) error {
	q.mu.Lock()
	if q.dropped > 0 {
		q.items = append(q.items, q.count())
		q.start()
	}
	drained := q.drained
	q.mu.Unlock()
	if drained == nil {
		return nil
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
