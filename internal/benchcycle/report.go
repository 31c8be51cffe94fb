package benchcycle

import (
	"slices"
	"testing"
	"time"
)

// ReportCycles reports r's throughput as "cycles/s": the cycles asked for
// over the elapsed time.
func ReportCycles(b *testing.B, r Result) {
	b.ReportMetric(float64(r.Cycles)/r.Elapsed.Seconds(), "cycles/s")
}

// ReportShares reports fairness: the fewest and the most holds any one
// contender got, as a fraction of its fair share (1 = exactly fair; 0 =
// starved), as "min-share" and "max-share". It reports nothing for fewer
// than 10 cycles per contender.
func ReportShares(b *testing.B, r Result) {
	if r.Cycles < 10*r.Contenders {
		return
	}
	per := perContender(r)
	fair := float64(r.Cycles) / float64(r.Contenders)
	b.ReportMetric(float64(slices.Min(per))/fair, "min-share")
	b.ReportMetric(float64(slices.Max(per))/fair, "max-share")
}

// ReportContention reports throughput ("holds/s"), and, given at least two
// holds per contender: the median handoff latency, from a release to the
// next holder's acquisition when the next holder is another contender
// ("µs-handoff-p50"); how often the releasing contender took the lock
// straight back ("%same-client"); the median and longest wait and their
// ratio ("µs-wait-p50", "ms-wait-max", "wait-max/p50"); and the busiest
// contender's share of holds over a fair share ("max-share/fair").
func ReportContention(b *testing.B, r Result) {
	holds := r.Holds
	b.ReportMetric(float64(len(holds))/r.Elapsed.Seconds(), "holds/s")
	if len(holds) < 2*r.Contenders {
		return
	}
	var handoffs, waits []time.Duration
	same := 0
	for i, h := range holds {
		waits = append(waits, h.Got.Sub(h.Asked))
		if i == 0 {
			continue
		}
		prev := holds[i-1]
		if h.Contender == prev.Contender {
			same++
		} else {
			handoffs = append(handoffs, h.Got.Sub(prev.Handed))
		}
	}
	slices.Sort(waits)
	slices.Sort(handoffs)
	med := waits[len(waits)/2]
	longest := waits[len(waits)-1]
	b.ReportMetric(float64(same)/float64(len(holds)-1)*100, "%same-client")
	if len(handoffs) > 0 {
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "µs-handoff-p50")
	}
	b.ReportMetric(float64(med.Microseconds()), "µs-wait-p50")
	b.ReportMetric(float64(longest.Microseconds())/1000, "ms-wait-max")
	b.ReportMetric(float64(longest)/float64(max(med, time.Microsecond)), "wait-max/p50")
	fair := float64(len(holds)) / float64(r.Contenders)
	b.ReportMetric(float64(slices.Max(perContender(r)))/fair, "max-share/fair")
}

// perContender returns how many holds each contender got.
func perContender(r Result) []int {
	per := make([]int, r.Contenders)
	for _, h := range r.Holds {
		per[h.Contender]++
	}
	return per
}
