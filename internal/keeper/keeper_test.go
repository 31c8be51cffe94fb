package keeper

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/slogtest"
)

func config(t *testing.T) baton.Config {
	t.Helper()
	cfg, err := baton.NewConfig(baton.WithTTL(3*time.Second), baton.WithDrift(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// recorder is a RenewFunc whose outcome the test sets, recording when each
// call started.
type recorder struct {
	mu     sync.Mutex
	calls  []time.Time
	result func(ctx context.Context) error
}

func (r *recorder) renew(ctx context.Context) error {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	f := r.result
	r.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// sent returns when each call so far started.
func (r *recorder) sent() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.calls...)
}

// notLost fails t if k is lost (or stopped) already.
func notLost(t *testing.T, k *Keeper, when string) {
	t.Helper()
	select {
	case <-k.Done():
		t.Fatalf("lost %s: %v", when, k.Err())
	default:
	}
}

func TestKeeper_RenewsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		r := &recorder{}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		defer k.Stop(baton.ErrReleased)

		if got, want := k.Deadline(), start.Add(cfg.TTL-cfg.Drift); !got.Equal(want) {
			t.Fatalf("initial deadline %v, want %v", got, want)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := r.count(); n != 10 {
			t.Fatalf("renewals in 10s at 1s interval = %d, want 10", n)
		}
		for i, c := range r.calls {
			if want := start.Add(time.Duration(i+1) * time.Second); !c.Equal(want) {
				t.Errorf("renewal %d at %v, want %v", i, c.Sub(start), want.Sub(start))
			}
		}
		if got, want := k.Deadline(), r.calls[9].Add(cfg.TTL-cfg.Drift); !got.Equal(want) {
			t.Errorf("deadline after renewals %v, want send time of last + TTL - drift", got.Sub(start))
		}
		notLost(t, k, "while renewals succeed")
	})
}

func TestKeeper_TransientFailures_LostAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		boom := errors.New("connection refused")
		r := &recorder{result: func(context.Context) error { return boom }}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		defer k.Stop(baton.ErrReleased)

		<-k.Done()
		lostAt := time.Since(start)
		if want := cfg.TTL - cfg.Drift; lostAt != want {
			t.Errorf("lost after %v, want exactly TTL - drift = %v", lostAt, want)
		}
		err := k.Err()
		if !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, ErrDeadline) || !errors.Is(err, boom) {
			t.Errorf("Err = %v; want it to match ErrLeaseLost, ErrDeadline and the last renewal error", err)
		}
		if r.count() < 2 {
			t.Errorf("renewal attempted %d times before the deadline; want retries", r.count())
		}
	})
}

// TestKeeper_StalledLogger_LostAtDeadline: the warning of a failed
// renewal goes to a handler that never returns (a log pipe nobody reads);
// the loss still comes at the deadline.
func TestKeeper_StalledLogger_LostAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		h := slogtest.NewBlocking(slog.LevelDebug, true)
		cfg.Logger = slog.New(h)
		r := &recorder{result: func(context.Context) error { return errors.New("connection refused") }}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		defer k.Stop(baton.ErrReleased)
		defer h.Free() // before Stop, which waits for the tick in the handler

		<-k.Done()
		if lostAt, want := time.Since(start), cfg.TTL-cfg.Drift; lostAt != want {
			t.Errorf("lost after %v, want exactly TTL - drift = %v", lostAt, want)
		}
		if h.Calls() == 0 {
			t.Error("the handler was never called: the test stalled nothing")
		}
	})
}

func TestKeeper_Refused_LostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		refused := errors.Join(baton.ErrLeaseLost, errors.New("lease not found"))
		r := &recorder{result: func(context.Context) error { return refused }}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		defer k.Stop(baton.ErrReleased)
		<-k.Done()
		if got := time.Since(start); got != cfg.RenewEvery {
			t.Errorf("lost after %v; want at the first renewal, %v", got, cfg.RenewEvery)
		}
		if !errors.Is(k.Err(), baton.ErrLeaseLost) {
			t.Errorf("Err = %v, want ErrLeaseLost", k.Err())
		}
		time.Sleep(5 * time.Second)
		if n := r.count(); n != 1 {
			t.Errorf("renewals after refusal = %d, want 1", n)
		}
	})
}

func TestKeeper_RenewalCtxEndsAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		var got time.Time
		r := &recorder{result: func(ctx context.Context) error {
			got, _ = ctx.Deadline()
			<-ctx.Done() // a renewal that hangs
			return ctx.Err()
		}}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		<-k.Done()
		if lostAt := time.Since(start); lostAt != cfg.TTL-cfg.Drift {
			t.Errorf("lost after %v, want %v", lostAt, cfg.TTL-cfg.Drift)
		}
		k.Stop(baton.ErrReleased) // awaits the renewal, which wrote got
		if want := start.Add(cfg.TTL - cfg.Drift); !got.Equal(want) {
			t.Errorf("renewal ctx deadline %v, want the local deadline %v", got.Sub(start), want.Sub(start))
		}
	})
}

func TestKeeper_LateConfirmation_IsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		// The renewal succeeds, but only after TTL - drift have passed since
		// it was sent: the server may have freed the lock meanwhile.
		r := &recorder{result: func(ctx context.Context) error {
			time.Sleep(cfg.TTL)
			return nil
		}}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		defer k.Stop(baton.ErrReleased)
		<-k.Done()
		if !errors.Is(k.Err(), baton.ErrLeaseLost) || !errors.Is(k.Err(), ErrDeadline) {
			t.Errorf("Err = %v, want ErrLeaseLost by the local deadline", k.Err())
		}
		// At the deadline the first grant gave, not when the late answer
		// came (TTL/3 + TTL after start), nor later from its send time.
		if took, want := time.Since(start), cfg.TTL-cfg.Drift; took != want {
			t.Errorf("lost %v after the grant; want at its local deadline, %v", took, want)
		}
	})
}

func TestKeeper_Stop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		r := &recorder{}
		k := Start(time.Now(), cfg, r.renew)
		time.Sleep(1500 * time.Millisecond)
		k.Stop(baton.ErrReleased)
		k.Stop(baton.ErrClosed) // idempotent
		if !errors.Is(k.Err(), baton.ErrReleased) {
			t.Errorf("Err after Stop = %v, want ErrReleased", k.Err())
		}
		n := r.count()
		time.Sleep(10 * time.Second)
		if r.count() != n {
			t.Errorf("renewed after Stop")
		}
	})
}

func TestKeeper_Lose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := Start(time.Now(), config(t), (&recorder{}).renew)
		gone := errors.New("key deleted")
		k.Lose(gone)
		if err := k.Err(); !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, gone) {
			t.Errorf("Err = %v, want ErrLeaseLost wrapping the cause", err)
		}
		k.Stop(baton.ErrReleased)
		if !errors.Is(k.Err(), gone) {
			t.Errorf("Stop after Lose replaced the cause: %v", k.Err())
		}
	})
}

// TestKeeper_RenewalIgnoringCtx_LostAtDeadline: a renewal whose client
// ignores its context (a long read timeout) cannot delay the loss.
func TestKeeper_RenewalIgnoringCtx_LostAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		r := &recorder{result: func(context.Context) error {
			time.Sleep(10 * time.Second) // a client with a 10s read timeout
			return errors.New("i/o timeout")
		}}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		<-k.Done()
		if lostAt := time.Since(start); lostAt != cfg.TTL-cfg.Drift {
			t.Errorf("lost after %v, want at the local deadline %v", lostAt, cfg.TTL-cfg.Drift)
		}
		if !errors.Is(k.Err(), ErrDeadline) {
			t.Errorf("Err = %v, want ErrDeadline", k.Err())
		}
		k.Stop(baton.ErrReleased) // waits for the stuck renewal to return
	})
}

// TestKeeper_ConfirmationAtDeadline_IsALoss: a renewal whose client ignores
// its context and confirms exactly at the local deadline came too late: the
// holder had to stop by then, whichever of the answer and the deadline the
// Keeper happens to see first. Repeated, since that order is up to the
// scheduler.
func TestKeeper_ConfirmationAtDeadline_IsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		for i := range 50 {
			r := &recorder{result: func(ctx context.Context) error {
				d, _ := ctx.Deadline()
				time.Sleep(time.Until(d)) // ignores ctx, answers at the deadline
				return nil
			}}
			start := time.Now()
			k := Start(start, cfg, r.renew)
			<-k.Done()
			if lostAt := time.Since(start); lostAt != cfg.TTL-cfg.Drift {
				t.Errorf("run %d: lost after %v, want at the first local deadline %v", i, lostAt, cfg.TTL-cfg.Drift)
			}
			if err := k.Err(); !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, ErrDeadline) {
				t.Errorf("run %d: Err = %v, want ErrLeaseLost and ErrDeadline", i, err)
			}
			k.Stop(baton.ErrReleased)
		}
	})
}

// TestKeeper_SlowRenewal_DeadlineFromSendTime: a renewal confirmed late
// moves the deadline to its send time plus TTL minus drift, not its answer
// time: the server may have counted the TTL from the moment the request
// reached it, which is no later than the send.
func TestKeeper_SlowRenewal_DeadlineFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t) // TTL 3s, renewed every 1s, drift 100ms
		r := &recorder{result: func(context.Context) error { time.Sleep(500 * time.Millisecond); return nil }}
		start := time.Now()
		k := Start(start, cfg, r.renew)
		defer k.Stop(baton.ErrReleased)
		time.Sleep(1600 * time.Millisecond) // the first renewal, sent at 1s, answered at 1.5s
		synctest.Wait()
		sent := r.sent()[0]
		if got, want := k.Deadline(), sent.Add(cfg.TTL-cfg.Drift); !got.Equal(want) {
			t.Fatalf("deadline %v after start, want %v (send time + TTL - drift)", got.Sub(start), want.Sub(start))
		}
	})
}

// TestKeeper_StartPastDeadline: a lease whose answer came at or after its
// local deadline is lost as Start returns, not a tick later on another
// goroutine: a backend that paused between its look and Start must not
// hand out a lease that reads as held.
func TestKeeper_StartPastDeadline(t *testing.T) {
	cfg := config(t)
	k := Start(time.Now().Add(-cfg.TTL), cfg, (&recorder{}).renew)
	defer k.Stop(baton.ErrReleased)
	if err := k.Err(); !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, ErrDeadline) {
		t.Fatalf("Err right after Start = %v, want a loss by the deadline", err)
	}
	select {
	case <-k.Done():
	default:
		t.Fatal("Done not closed right after Start")
	}
}

// TestKeeper_StopNil: Stop with no cause closes Done and reports a cause
// all the same (Done and Err agree), and a second Stop is a no-op, not a
// second close.
func TestKeeper_StopNil(t *testing.T) {
	k := Start(time.Now(), config(t), (&recorder{}).renew)
	k.Stop(nil)
	if k.Err() == nil {
		t.Error("Err = nil after Stop(nil), with Done closed")
	}
	k.Stop(baton.ErrReleased) // closed Done twice before
	k.Lose(errors.New("late"))
}

// answersAfter is a RenewFunc result that answers after rtt.
func answersAfter(rtt time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-time.After(rtt):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestKeeper_Settle_DeadlineLagsOneRenewal: with Settle, a renewal moves
// the deadline to the send time of the one before it (which it settles),
// not to its own; until the first settles, the deadline counts from the
// base given.
func TestKeeper_Settle_DeadlineLagsOneRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t) // TTL 3s, RenewEvery 1s, drift 100ms
		r := &recorder{result: answersAfter(50 * time.Millisecond)}
		start := time.Now()
		base := start.Add(-200 * time.Millisecond)
		k := Start(start, cfg, r.renew, Settle(700*time.Millisecond, base))
		defer k.Stop(baton.ErrReleased)
		select {
		case <-k.Settled():
		default:
			t.Fatal("Settled not closed with a base given")
		}
		life := cfg.TTL - cfg.Drift
		if got, want := k.Deadline(), base.Add(life); !got.Equal(want) {
			t.Fatalf("initial deadline %v, want base + TTL - drift (%v)", got.Sub(start), want.Sub(start))
		}
		time.Sleep(1100 * time.Millisecond) // the first renewal settles Start's request
		synctest.Wait()
		if got, want := k.Deadline(), start.Add(life); !got.Equal(want) {
			t.Fatalf("deadline after the first renewal %v, want Start's send + TTL - drift (%v)", got.Sub(start), want.Sub(start))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		calls := r.sent()
		if len(calls) != 6 {
			t.Fatalf("renewals in 6.1s at 1s interval = %d, want 6", len(calls))
		}
		if got, want := k.Deadline(), calls[4].Add(life); !got.Equal(want) {
			t.Fatalf("deadline %v after renewal 6, want renewal 5's send + TTL - drift (%v)", got.Sub(start), want.Sub(start))
		}
		if got := k.LastRenewal(); !got.Equal(calls[5]) {
			t.Errorf("LastRenewal %v, want the last confirmed send %v", got.Sub(start), calls[5].Sub(start))
		}
	})
}

// TestKeeper_Settle_SlowAnswer_NextWaits: a renewal whose answer came late
// is followed by one sent no sooner than the settling time after that
// answer, which settles it; sent at RenewEvery it would not, and the
// deadline would fall two renewals behind.
func TestKeeper_Settle_SlowAnswer_NextWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t)
		r := &recorder{result: answersAfter(400 * time.Millisecond)}
		start := time.Now()
		k := Start(start, cfg, r.renew, Settle(700*time.Millisecond, start))
		defer k.Stop(baton.ErrReleased)
		time.Sleep(2600 * time.Millisecond)
		synctest.Wait()
		calls := r.sent()
		if len(calls) != 2 {
			t.Fatalf("renewals in 2.6s = %d, want 2", len(calls))
		}
		// The first is sent at 1s and answered at 1.4s: the second waits
		// until 2.1s, and settles it.
		if got, want := calls[1].Sub(start), 2100*time.Millisecond; got != want {
			t.Errorf("second renewal sent at %v, want %v (the first's answer + 700ms)", got, want)
		}
		if got, want := k.Deadline(), calls[0].Add(cfg.TTL-cfg.Drift); !got.Equal(want) {
			t.Errorf("deadline %v, want the first renewal's send + TTL - drift (%v)", got.Sub(start), want.Sub(start))
		}
		notLost(t, k, "while renewals succeed")
	})
}

// TestKeeper_Settle_NoBase: with no base known, Settled waits for the
// first renewal, sent the settling time after Start, to settle Start's
// request; a Keeper whose renewals all fail is lost at that request's
// deadline and never settles.
func TestKeeper_Settle_NoBase(t *testing.T) {
	t.Run("settles", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := config(t)
			r := &recorder{result: answersAfter(10 * time.Millisecond)}
			start := time.Now()
			k := Start(start, cfg, r.renew, Settle(700*time.Millisecond, time.Time{}))
			defer k.Stop(baton.ErrReleased)
			select {
			case <-k.Settled():
				t.Fatal("Settled closed before any confirmation counts")
			default:
			}
			<-k.Settled()
			if got, want := time.Since(start), 710*time.Millisecond; got != want {
				t.Errorf("settled %v after Start, want %v (the settling time and the answer)", got, want)
			}
			if got, want := k.Deadline(), start.Add(cfg.TTL-cfg.Drift); !got.Equal(want) {
				t.Errorf("deadline %v, want Start's send + TTL - drift (%v)", got.Sub(start), want.Sub(start))
			}
		})
	})
	t.Run("never answered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := config(t)
			r := &recorder{result: func(context.Context) error { return errors.New("no answer") }}
			start := time.Now()
			k := Start(start, cfg, r.renew, Settle(700*time.Millisecond, time.Time{}))
			<-k.Done()
			if got, want := time.Since(start), cfg.TTL-cfg.Drift; got != want {
				t.Errorf("lost %v after Start, want %v", got, want)
			}
			if !errors.Is(k.Err(), ErrDeadline) {
				t.Errorf("Err = %v, want ErrDeadline", k.Err())
			}
			select {
			case <-k.Settled():
				t.Error("Settled closed though no confirmation counted")
			default:
			}
		})
	})
}

// TestKeeper_Settle_LateRecovery_NextComesSooner: renewals fail, and a
// retry succeeds just before the deadline. Its deadline counts from the
// renewal before it, a second older than the retry, so the next renewal
// must go out sooner than RenewEvery after the retry: here at its answer
// plus the settling time, which leaves a slow answer (200ms) in time.
// Sent RenewEvery after the retry, that answer would come after the
// deadline.
func TestKeeper_Settle_LateRecovery_NextComesSooner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(t) // TTL 3s, RenewEvery 1s, drift 100ms
		start := time.Now()
		r := &recorder{result: func(ctx context.Context) error {
			switch at := time.Since(start); {
			case at < 1500*time.Millisecond, at >= 2700*time.Millisecond && at < 2800*time.Millisecond:
				return answersAfter(10 * time.Millisecond)(ctx)
			case at < 2700*time.Millisecond:
				return errors.New("service unavailable")
			default:
				return answersAfter(200 * time.Millisecond)(ctx)
			}
		}}
		k := Start(start, cfg, r.renew, Settle(700*time.Millisecond, start))
		defer k.Stop(baton.ErrReleased)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		notLost(t, k, "after the service came back")
		calls := r.sent()
		var retry, next time.Duration
		for i, c := range calls {
			if at := c.Sub(start); at >= 2700*time.Millisecond && at < 2800*time.Millisecond && i+1 < len(calls) {
				retry, next = at, calls[i+1].Sub(start)
				break
			}
		}
		if retry == 0 {
			t.Fatal("no retry, followed by a renewal, in the window where the service came back")
		}
		if want := retry + 10*time.Millisecond + 700*time.Millisecond; next != want {
			t.Errorf("renewal after the retry at %v sent at %v; want %v (its answer + the settling time)", retry, next, want)
		}
	})
}

// TestKeeper_OnLoss: OnLoss's function is called once for each way a
// lease is lost (a refusal, the deadline, Lose, an answer past the
// deadline at Start), by the time Stop returns, and never for a Stop, nor
// again for a Stop after the loss.
func TestKeeper_OnLoss(t *testing.T) {
	refused := errors.Join(baton.ErrLeaseLost, errors.New("lease not found"))
	failed := errors.New("connection refused")
	for _, tc := range []struct {
		name     string
		start    func(cfg baton.Config) time.Time
		result   func(context.Context) error
		lose     bool // the test calls Lose after 1.5s
		stop     bool // the test calls Stop after 1.5s, before any loss
		wantLoss bool
	}{
		{name: "refused", result: func(context.Context) error { return refused }, wantLoss: true},
		{name: "deadline", result: func(context.Context) error { return failed }, wantLoss: true},
		{name: "deadline, renewal ignoring its ctx", result: func(context.Context) error { time.Sleep(5 * time.Second); return nil }, wantLoss: true},
		{name: "lose", lose: true, wantLoss: true},
		{name: "lose, renewal in flight", result: func(context.Context) error { time.Sleep(5 * time.Second); return nil }, lose: true, wantLoss: true},
		{name: "past deadline at start", start: func(cfg baton.Config) time.Time { return time.Now().Add(-cfg.TTL) }, wantLoss: true},
		{name: "stop", stop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := config(t)
				start := time.Now()
				if tc.start != nil {
					start = tc.start(cfg)
				}
				var calls, inFlight int  // at the call
				var running atomic.Int32 // renewals
				renew := func(ctx context.Context) error {
					running.Add(1)
					defer running.Add(-1)
					return (&recorder{result: tc.result}).renew(ctx)
				}
				k := Start(start, cfg, renew, OnLoss(func() { calls++; inFlight = int(running.Load()) }))
				time.Sleep(1500 * time.Millisecond)
				switch {
				case tc.lose:
					k.Lose(errors.New("key deleted"))
					if calls != 1 {
						t.Fatalf("OnLoss's function called %d times by the time Lose returned, want 1", calls)
					}
				case tc.stop:
					k.Stop(baton.ErrReleased)
				}
				time.Sleep(2 * cfg.TTL)
				k.Stop(baton.ErrClosed)
				want := 0
				if tc.wantLoss {
					want = 1
				}
				if calls != want {
					t.Fatalf("OnLoss's function called %d times (Err %v), want %d", calls, k.Err(), want)
				}
				if inFlight != 0 {
					t.Fatalf("OnLoss's function called with %d renewals in flight, want none", inFlight)
				}
				if lost := errors.Is(k.Err(), baton.ErrLeaseLost); lost != tc.wantLoss {
					t.Fatalf("Err = %v; lost %v, want %v", k.Err(), lost, tc.wantLoss)
				}
			})
		})
	}
}
