package memtrack

import (
	"errors"
	"runtime"
	"sync"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// ledger is the records one allocation counts in: the device's, and, for
// an allocation made through a [Category], the category's, which count it
// as one operation for the resets of the cumulative figures (resetGate).
// The paths count through it: ledger.count and ledger.countFailure for an
// allocation, ledger.uncount for a release; where there is no category,
// they call the device's record themselves, a call less on the paths
// that every feature off takes.
type ledger struct {
	rec  *tracker.Record // the device's
	crec *tracker.Record // the category's; nil for none
	set  *categorySet    // the categories crec is one of; nil for none
}

// inCategory adds the record of category idx (1-based) of cs to the
// ledger. Small enough to inline into the allocation path
// (TestIntendedInlining).
func (l *ledger) inCategory(cs *categorySet, idx uint8) { l.crec, l.set = &cs.recs[idx-1], cs }

// limited reports whether a limit may refuse: the category's record or
// the device's has one, a load or two, inlined (TestIntendedInlining). The
// path calls limitRefusal only then.
func (l *ledger) limited() bool {
	return l.crec != nil && l.crec.Limit() > 0 || l.rec.Limit() > 0
}

// limitRefusal is the check of the memory limits that the allocation path
// makes before it asks for memory (and after it has refused its bad
// input), so that a request over a limit costs no device memory: it
// returns the refusal of size bytes that the category's limit or else the
// device's does not leave room for, and nil where both do. It counts
// nothing: the caller gives the refusal to Device.refuse. The records
// check again, exactly, when they count.
func (l *ledger) limitRefusal(size int64) *OutOfMemoryError {
	if l.crec != nil {
		if lim, cur := l.crec.Limit(), l.crec.Tracked(); lim > 0 && size > lim-cur {
			return &OutOfMemoryError{Requested: size, Tracked: l.rec.Tracked(), CategoryTracked: cur, Limit: lim, Reason: categoryLimitReason}
		}
	}
	if lim := l.rec.Limit(); lim > 0 {
		if cur := l.rec.Tracked(); size > lim-cur {
			e := &OutOfMemoryError{Requested: size, Tracked: cur, Limit: lim, Reason: "memory limit"}
			if l.crec != nil {
				e.CategoryTracked = l.crec.Tracked()
			}
			return e
		}
	}
	return nil
}

// refusal describes an allocation of size bytes on d that a record of the
// ledger refused with err (ledger.count), the category's where
// byCategory, with the fields that explain it: the limit and the figure it
// was held against for a [*tracker.LimitError], the tracker's capacity (in
// Reason) for anything else.
func (l *ledger) refusal(err error, byCategory bool, d Device, size int64) *OutOfMemoryError {
	var le *tracker.LimitError
	if !errors.As(err, &le) {
		return &OutOfMemoryError{Device: d, Requested: size, Tracked: l.rec.Tracked(), Reason: "the tracker's capacity: " + reason(err)}
	}
	e := &OutOfMemoryError{Device: d, Requested: size, Tracked: le.Tracked, Limit: le.Limit, Reason: "memory limit"}
	if byCategory {
		// The category's limit: its LimitError holds the category's figure.
		e.CategoryTracked, e.Tracked, e.Reason = le.Tracked, l.rec.Tracked(), categoryLimitReason
	}
	return e
}

// count counts size bytes in the category's record, then in the device's,
// as one operation for the resets. Where the category's record refuses,
// the failure is counted on the device too and byCategory is true; where
// the device's refuses, the category takes its count back
// (tracker.Record.Cancel). Either record counts its own refusal. Without
// a category, the allocation path counts in the device's record itself:
// tracker.Record.Alloc, called from the path rather than through count,
// costs a call less.
func (l *ledger) count(size int64) (byCategory bool, err error) {
	g := &l.set.gate
	g.enter()
	if err = l.crec.Alloc(size); err != nil {
		l.rec.RecordFailure()
		byCategory = true
	} else if err = l.rec.Alloc(size); err != nil {
		_ = l.crec.Cancel(size) // cannot fail: it holds size
	}
	g.leave()
	return byCategory, err
}

// countFailure counts a refused request on the device, and in the
// category, if any, as one operation for the resets.
func (l *ledger) countFailure() {
	if l.crec == nil {
		l.rec.RecordFailure()
		return
	}
	g := &l.set.gate
	g.enter()
	l.rec.RecordFailure()
	l.crec.RecordFailure()
	g.leave()
}

// uncount takes size bytes freed from the device's record, then from the
// category's, as one operation for the resets. The category is not
// uncounted where the device's record refuses (it holds less than size).
// Without a category, the release path uncounts in the device's record
// itself (tracker.Record.Free), as the allocation path counts.
func (l *ledger) uncount(size int64) error {
	g := &l.set.gate
	g.enter()
	err := l.rec.Free(size)
	if err == nil {
		_ = l.crec.Free(size) // cannot fail: the category holds the bytes
	}
	g.leave()
	return err
}

// categoryTracked returns the bytes the category's record tracks, 0 for
// none: the figure the history writes beside an event, with the device's
// (rec.Tracked).
func (l *ledger) categoryTracked() int64 {
	if l.crec == nil {
		return 0
	}
	return l.crec.Tracked()
}

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

// inCategoryOf adds the record of category cat (1-based) of device
// ordinal of s to the ledger: an allocation's category, released.
func (l *ledger) inCategoryOf(s *deviceTable, ordinal int, cat uint8) {
	// A category's allocation was counted in its device's categories,
	// which are never removed.
	cs := s.categoriesOf(ordinal)
	l.crec, l.set = &cs.recs[cat-1], cs
}

// categorySet holds one device's categories: their names, in the order
// they were made, and their records. Names are written under mu before n
// publishes them, and never change.
type categorySet struct {
	mu    sync.Mutex
	n     atomic.Int32
	names []string         // room for every category the device may have, made with the set
	recs  []tracker.Record // likewise
	gate  resetGate        // orders the category operations with the resets (resetAccumulated)
}

// categoriesSlot is the slot of a device's categories in its state
// (deviceTable.stateOf).
const categoriesSlot = 3

// categoriesOf returns the categories of device ordinal, nil where it has
// none.
func (s *deviceTable) categoriesOf(ordinal int) *categorySet {
	return slot[categorySet](s, ordinal, categoriesSlot)
}

// list returns the categories' names and records, in the order they were
// made.
func (cs *categorySet) list() ([]string, []*tracker.Record) {
	n := int(cs.n.Load())
	recs := make([]*tracker.Record, n)
	for i := range recs {
		recs[i] = &cs.recs[i]
	}
	return cs.names[:n:n], recs
}

// name returns the name of category idx (1-based), or "" for 0.
func (cs *categorySet) name(idx uint8) string {
	if cs == nil || idx == 0 {
		return ""
	}
	return cs.names[idx-1]
}
