package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/ctxhook"
	"github.com/baton-go/baton/internal/obsend"
	"github.com/baton-go/baton/internal/rediskit"
)

var _ baton.Observer = (*backend)(nil)

// observerTTL is how long an observer's registration ({K}:n) lasts; an
// observer renews it every observerRefresh at most, also while its reader
// is away, so the scripts keep writing changes to the stream while anyone
// observes. A backend keeps them in obsTTL and obsRefresh, which tests
// shorten.
const (
	observerTTL     = time.Minute
	observerRefresh = 20 * time.Second
)

// Observe implements baton.Observer. While someone observes a lock (its
// registration key {K}:n lives), the scripts that give the lock to a holder
// or free it append the change to the lock's stream {K}:o, so an observer
// reads every such change in order with XREAD. When the registration had
// lapsed (the key was lost to a failover or an eviction, or no observer
// could reach Redis for observerTTL), changes made meanwhile are not in the
// stream: the next observer to look appends the holder there is then, so
// every observer goes on from the holder there is, having missed the terms
// in between. An observer whose reader is away keeps the registration alive
// (see send), so a slow reader misses nothing until it falls behind by
// more than the stream's cap (64 entries, or up to a hundred more: Redis
// trims whole nodes): the changes trimmed before it read them are lost to
// it, and the observation logs a warning with their number (from Redis 7,
// whose XINFO STREAM counts the entries added; a lower bound when the
// stream was lost and made anew meanwhile, and perhaps too high when the
// client reads from replicas, a ClusterClient with ReadOnly, whose XREAD
// may see entries the master already trimmed). A lease that expires writes
// nothing; the observer reads the lock's state again when the holder's
// PTTL runs out, and when the holder it finds is not the last one the
// stream named and no change is waiting in the stream, the old holder's
// key must have expired: it reports a term with no leader, then the
// holder it found, if any. That holder took the key with a claim (a plain
// SET, see Acquire), whose note follows in a moment unless its client died
// first; while the lock is free the observer reads its state every
// RenewEvery (at most observerRefresh), which bounds how late such a
// holder is reported. A claim that finds a waiter queued gives it the key
// with a release one round trip later: an observer that looked in between
// reports the claimer as a holder for that moment. An observation whose
// server stops answering ends within RenewEvery and twice the request
// timeout (on a client with ContextTimeoutEnabled, as Open's; else
// go-redis ends the blocked read 10s after its block). Close ends every
// observation, and waits for it (see Close); after Close, Observe returns
// an error matching baton.ErrClosed.
func (b *backend) Observe(ctx context.Context, name string) (<-chan baton.Term, error) {
	if err := baton.ValidateName(name); err != nil {
		return nil, err
	}
	k := b.keys(name)
	st, err := b.state(ctx, k)
	if err != nil {
		return nil, err
	}
	b.obsMu.Lock()
	defer b.obsMu.Unlock()
	if b.obsClosed {
		return nil, fmt.Errorf("observe %q: %w", name, baton.ErrClosed)
	}
	// The observation ends with ctx or at Close, whichever comes first.
	// Its goroutine returns only once the callback that Close started (in
	// a goroutine of its own) has, so that Close, which waits for it,
	// leaves nothing running.
	octx, cancel := context.WithCancelCause(ctx)
	stopLife := ctxhook.AfterFunc(b.life, func() { cancel(context.Cause(b.life)) })
	ch := make(chan baton.Term)
	b.observers.Go(func() {
		defer cancel(nil)
		defer stopLife()
		b.observe(octx, k, st, ch)
	})
	return ch, nil
}

// lockState is what stateScript reads.
type lockState struct {
	value string        // the holder's value; "" when free
	pttl  time.Duration // the key's remaining TTL; negative when it has none (or is gone)
	last  string        // the change stream's last entry ID
	added int64         // how many entries were ever added to the stream; -1 when Redis does not say
	held  int64         // how many entries the stream holds
	first string        // the stream's first entry ID
}

func (b *backend) state(ctx context.Context, k keys) (lockState, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	res, err := stateScript.Run(octx, b.client, []string{k.lock, k.o, k.n}, b.obsTTL.Milliseconds(), "0").Slice()
	if err != nil {
		return lockState{}, b.fail(ctx, "read lock state", err, k.lock, k.o, k.n)
	}
	var st lockState
	if len(res) != 6 {
		return lockState{}, b.fail(ctx, "read lock state", errors.New("unexpected reply"))
	}
	st.value, _ = res[0].(string)
	st.pttl = -1
	if ms, ok := res[1].(int64); ok {
		st.pttl = time.Duration(ms) * time.Millisecond
	}
	st.last, _ = res[2].(string)
	st.added = -1
	if n, ok := res[3].(int64); ok {
		st.added = n
	}
	st.held, _ = res[4].(int64)
	st.first, _ = res[5].(string)
	return st, nil
}

// register renews the observers' registration (see stateScript) without
// reading the lock's state.
func (b *backend) register(ctx context.Context, k keys) {
	octx, cancel := b.op(ctx)
	defer cancel()
	_ = stateScript.Run(octx, b.client, []string{k.lock, k.o, k.n}, b.obsTTL.Milliseconds(), "1").Err()
}

func (b *backend) term(name, value string) baton.Term {
	if value == "" {
		return baton.Term{Election: name}
	}
	return baton.Term{Election: name, Leader: rediskit.HolderOf(value), Key: b.keys(name).lock}
}

// observe is owned by Observe's caller through ctx (which Close also
// ends), and counted in b.observers: it returns once its requests have,
// its quit entry's included. It closes ch when ctx ends or Redis fails.
func (b *backend) observe(ctx context.Context, k keys, st lockState, ch chan<- baton.Term) {
	// go-redis ends a blocked read at a deadline but not at a
	// cancellation: when ctx ends, an entry in a stream of this observer's
	// own, which every XREAD also reads (from its start, so one added
	// before the XREAD ends it too), ends the wait at once. It shares the
	// lock's hash slot, as Cluster wants of the keys of one XREAD.
	quit := "{" + k.lock + "}:x:" + rediskit.NewValue("")[:16]
	added := make(chan bool, 1) // whether the entry was added, once its request returned
	stop := context.AfterFunc(ctx, func() {
		// Counted too, so that Close returns only once this goroutine
		// has: the observation, which waits for added below, still
		// holds its own count, so this Add never races Close's Wait.
		b.observers.Add(1)
		defer b.observers.Done()
		qctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
		defer cancel()
		_, err := b.client.TxPipelined(qctx, func(p goredis.Pipeliner) error {
			p.XAdd(qctx, &goredis.XAddArgs{Stream: quit, Values: []string{"quit", "1"}})
			p.PExpire(qctx, quit, time.Minute) // should the DEL below not come
			return nil
		})
		added <- err == nil
	})
	defer func() {
		// The entry's request, if it was sent, returns before the
		// observation does; the stream is deleted if it was added (one
		// that may have been, on a server that did not answer, expires).
		if !stop() && <-added {
			qctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
			defer cancel()
			_ = b.client.Del(qctx, quit).Err()
		}
	}()
	defer close(ch) // first: the DEL above does not hold the caller up
	cur, last, pttl := st.value, st.last, st.pttl
	renewed := time.Now() // the registration's last renewal (Observe's state read)
	trimmed := trimCount{base: st.added}
	if !b.send(ctx, k, &renewed, ch, b.term(k.name, cur)) {
		return
	}
	for {
		// Wait for the next change, or for the holder's key to run out,
		// at most RenewEvery: a server that stops answering ends the
		// observation within RenewEvery and twice the request timeout
		// (the read's, then the look's at the key; on a client with
		// ContextTimeoutEnabled, as Open's: go-redis ends a blocked read
		// 10s after its block otherwise).
		block := min(b.obsRefresh, b.cfg.RenewEvery)
		if cur != "" && pttl >= 0 { // a key without a TTL (set by hand) never runs out
			block = min(block, pttl+5*time.Millisecond)
		}
		block = max(block, 10*time.Millisecond) // BLOCK counts whole ms; 0 would wait for ever
		rctx, cancel := context.WithTimeout(ctx, block+b.cfg.RequestTimeout)
		res, err := b.client.XRead(rctx, &goredis.XReadArgs{Streams: []string{k.o, quit, last, "0-0"}, Block: block, Count: 64}).Result()
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil, errors.Is(err, goredis.Nil):
		case rediskit.TimedOut(err):
			// A late answer, or none: the look at the key below, bounded
			// by the request timeout, says whether Redis still answers.
			res = nil
		default:
			obsend.Warn(ctx, b.cfg.Logger, "Redis did not answer its read of the changes", "election", k.name, "err", err)
			return
		}
		for _, s := range res {
			if s.Stream != k.o {
				continue
			}
			for _, m := range s.Messages {
				last = m.ID
				trimmed.read++
				b.obsRead.Add(1)
				v, _ := m.Values["v"].(string)
				if v != cur {
					cur = v
					if !b.send(ctx, k, &renewed, ch, b.term(k.name, cur)) {
						return
					}
				}
			}
		}
		// Look at the key: an expired holder left no entry.
		now, err := b.state(ctx, k)
		if err != nil {
			obsend.Warn(ctx, b.cfg.Logger, "Redis did not answer its read of the lock", "election", k.name, "err", err)
			return
		}
		renewed = time.Now()
		pttl = now.pttl
		if streamIDLess(now.last, last) {
			// The stream went back (a failover to a replica that had not
			// got its last entries, or a server whose clock is behind):
			// entries after its new end would come with IDs below ours,
			// which XREAD from ours would never return. Go on from its end.
			last = now.last
			trimmed.base = -1
		}
		if missed := trimmed.at(now, last); missed > 0 {
			b.cfg.Logger.Warn("an observer's reader is far behind; changes past the stream's cap were trimmed before it read them", "election", k.name, "missed", missed)
		}
		if now.value != cur && now.last == last {
			// No change is waiting in the stream, yet the holder is not
			// the last one it named: that one expired, and the key is
			// free or was claimed since by a plain SET whose note has
			// not come (or never will: its client died in between).
			if cur != "" && !b.send(ctx, k, &renewed, ch, b.term(k.name, "")) {
				return
			}
			cur = now.value
			if cur != "" && !b.send(ctx, k, &renewed, ch, b.term(k.name, cur)) {
				return
			}
		}
	}
}

// trimCount counts the changes an observer missed because the stream was
// trimmed (MAXLEN, its cap) before it read them.
type trimCount struct {
	base int64 // the stream's entries-added when the observer had read every entry before its first unread one; -1: not known
	read int64 // entries read since
}

// at counts at a look at the stream (now), the observer having read up to
// last, and returns how many changes it missed since the last count. It
// counts at once when every entry the stream holds is after last (entries
// between were trimmed, or none was: the count says which), so that a
// reader that stays behind is told too; else once read up to the stream's
// end. In between, nothing unread can have been trimmed: an entry up to
// last is still there, and trimming takes the oldest first. It counts
// nothing when the count is not known (Redis before 7, XINFO refused, or
// the stream went back: base -1), or the stream was made anew (its count
// fell below base); a stream made anew that has since had more entries
// than base makes the count a lower bound.
func (c *trimCount) at(now lockState, last string) (missed int64) {
	var unread int64 // entries in the stream after last
	switch {
	case now.held > 0 && streamIDLess(last, now.first):
		unread = now.held
	case now.last == last:
	default:
		return 0
	}
	if c.base >= 0 && now.added >= c.base {
		missed = max(now.added-c.base-c.read-unread, 0)
	}
	c.base, c.read = now.added-unread, 0
	if now.added < 0 {
		c.base = -1
	}
	return missed
}

// streamIDLess reports whether stream entry ID a ("ms-seq") comes before
// b. An ID that does not parse is not less.
func streamIDLess(a, b string) bool {
	ams, aseq, aok := parseStreamID(a)
	bms, bseq, bok := parseStreamID(b)
	return aok && bok && (ams < bms || ams == bms && aseq < bseq)
}

func parseStreamID(id string) (ms, seq uint64, ok bool) {
	m, s, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(m, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

// send sends t on ch, unless ctx ends first. While the reader is away, it
// renews the observers' registration once observerRefresh has passed
// since the last renewal (renewed, which it updates), also across the
// sends of one batch, so that the scripts go on writing changes to the
// stream for this observer: a slow reader then misses a change only past
// the stream's cap.
func (b *backend) send(ctx context.Context, k keys, renewed *time.Time, ch chan<- baton.Term, t baton.Term) bool {
	select {
	case ch <- t:
		return true
	case <-ctx.Done():
		return false
	default:
	}
	timer := time.NewTimer(time.Until(renewed.Add(b.obsRefresh)))
	defer timer.Stop()
	for {
		select {
		case ch <- t:
			return true
		case <-ctx.Done():
			return false
		case <-timer.C:
			b.register(ctx, k) // a failure shows at the next read
			*renewed = time.Now()
			timer.Reset(b.obsRefresh)
		}
	}
}
