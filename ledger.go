package memtrack

import (
	"runtime"
	"sync"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// A category operation counts in two records one after the other: the
// category's and the device's. A reset of the cumulative figures
// (Device.ResetAccumulatedMemoryStats) resets them one after the other
// too, so that without more an operation could count in one record before
// the reset and in the other after it, and the category's figures would
// no longer add up to the device's. The device's categories share a
// resetGate: each category operation passes it, and a reset closes it
// while it resets the categories and the device, so that every operation
// counts wholly before or wholly after the reset, in both records.
//
// An operation outside categories counts in the device's record only, and
// does not pass the gate: it costs what it did before categories.

// resetGate orders a device's category operations with the resets of its
// cumulative figures. Operations never wait for each other: passing costs
// one atomic add to enter and one to leave, and waits only while a reset
// runs. A reset waits for the operations under way to leave, which hold
// no lock and call nothing that could wait in turn.
type resetGate struct {
	ops  atomic.Int64                  // operations under way
	done atomic.Pointer[chan struct{}] // while a reset waits or runs, closed when it ends; nil otherwise
	mu   sync.Mutex                    // serialises the resets
}

// enter lets an operation in, waiting while a reset runs.
func (g *resetGate) enter() {
	for {
		g.ops.Inc()
		p := g.done.Load()
		if p == nil {
			return
		}
		g.ops.Dec()
		<-*p // wait for the reset to end
	}
}

// leave lets the operation out.
func (g *resetGate) leave() { g.ops.Dec() }

// reset runs f once no operation is under way, keeping new ones out until
// it returns.
func (g *resetGate) reset(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	done := make(chan struct{})
	g.done.Store(&done)
	for g.ops.Load() != 0 {
		runtime.Gosched() // an operation under way is a few atomic updates from leaving
	}
	f()
	g.done.Store(nil)
	close(done)
}

// resetAccumulated resets the cumulative figures of device ordinal in s,
// its record r's and its categories', as one step for the category
// operations.
func resetAccumulated(s *kindState, r *tracker.Record, ordinal int) {
	cs := s.cats.lookup(ordinal)
	if cs == nil {
		r.ResetAccumulated()
		return
	}
	cs.gate.reset(func() {
		_, recs := cs.list()
		for _, cr := range recs {
			cr.ResetAccumulated()
		}
		r.ResetAccumulated()
	})
}

// count counts size bytes in the category's record crec (nil for none:
// the device's record only), then in the device's record rec, as one
// operation for the resets. Where crec refuses, the failure is counted on
// the device too and byCategory is true; where rec refuses, the category
// takes its count back (tracker.Record.Cancel). Either record counts its
// own refusal.
func (c Category) count(rec, crec *tracker.Record, size int64) (byCategory bool, err error) {
	if crec == nil {
		return false, rec.Alloc(size)
	}
	g := &c.set.gate
	g.enter()
	if err = crec.Alloc(size); err != nil {
		rec.RecordFailure()
		byCategory = true
	} else if err = rec.Alloc(size); err != nil {
		_ = crec.Cancel(size) // cannot fail: it holds size
	}
	g.leave()
	return byCategory, err
}

// countFailure counts a refused request on the device (rec) and in the
// category, if it is one, as one operation for the resets.
func (c Category) countFailure(rec *tracker.Record) {
	if c.set == nil {
		rec.RecordFailure()
		return
	}
	g := &c.set.gate
	g.enter()
	rec.RecordFailure()
	c.set.recs[c.idx-1].RecordFailure()
	g.leave()
}

// uncount uncounts size bytes freed from the device's record rec and from
// category cat of the set, as one operation for the resets; it returns the
// category's record. The category is not uncounted where the device's
// record refuses.
func (cs *categorySet) uncount(cat uint8, rec *tracker.Record, size int64) (*tracker.Record, error) {
	crec := &cs.recs[cat-1]
	cs.gate.enter()
	err := rec.Free(size)
	if err == nil {
		_ = crec.Free(size) // cannot fail: the category holds the bytes
	}
	cs.gate.leave()
	return crec, err
}
