// Package parallel runs one call per item, all at once, as the backends'
// Close ends its holds: a lock service that does not answer then holds
// Close up one release timeout, not one per hold.
package parallel

import (
	"errors"
	"sync"
)

// Join calls f on each of xs, each in a goroutine of its own, waits for
// them all and returns their errors joined (nil when none failed).
func Join[T any](xs []T, f func(T) error) error {
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Go(func() { errs[i] = f(x) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
