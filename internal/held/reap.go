package held

// Querier is how a [Figure] learns that its frees in stream order have
// executed: the driver's queries of the events recorded after them, bound
// to the device whose figure it is. The Figure calls it with one reading
// at a time.
type Querier[E comparable] interface {
	// Query asks the driver, in one call, how far each stream of qs has
	// come through its events, and writes each one's answer into it (see
	// [Query]). It returns false where the device cannot be asked (it is
	// lost): nothing will run on it again, and every free counts as
	// executed. The slice, and the Events in it, are the Figure's, not to
	// be kept.
	Query(qs []Query[E]) bool
	// Destroy destroys e, an event of another context than the device's
	// own, once reached: only events of the device's own context are kept
	// for reuse.
	Destroy(e E)
}

// Query is a reading's question of one stream, and its answer.
type Query[E comparable] struct {
	// Events are events recorded on the stream after its frees, in the
	// order the stream reaches them. Ask how many of them, from the
	// oldest, the stream has reached: the newest first, every older one
	// being reached where it is (an event captures all the work enqueued
	// on its stream before it), and, where it is not, the first not
	// reached by bisection. The frees of a stream not Ordered come one to
	// a Query.
	Events []E

	// The answer.

	// Reached is how many of Events, from the oldest, the stream has
	// reached.
	Reached int
	// Gone says that a query failed (the event or its context is gone,
	// or the device met a sticky error): the frees of the events not
	// reached count as executed too (nothing will run there again), and
	// none of the events is to be recorded again.
	Gone bool
}

// PendingBound is how many frees may wait for their events before
// [Figure.Freed] reads itself.
const PendingBound = 64

// asked is what a reading asked of one entry: of an Ordered stream, its
// first n segments (their events); of a stream not Ordered, the one
// segment seg.
type asked[E comparable] struct {
	e   *entry[E]
	n   int
	seg int
}

// reap uncounts the pending frees that a reading learns have executed,
// where there are any.
func (f *Figure[E, Q]) reap() {
	if f.npending.Load() == 0 {
		if f.reapAt.Load() != 0 {
			f.reapAt.Store(0)
		}
		return
	}
	f.reapMu.Lock()
	f.reapLocked()
	f.reapMu.Unlock()
}

// reapLocked is reap, with reapMu held. It asks the driver in one call
// about each stream with frees pending (Query), and uncounts what the
// answers show executed; the streams' entries stay unlocked while the
// driver is asked, so that frees and allocations go on. Freed reads next
// at twice what this reading leaves, so that a stream far behind is not
// asked at every free, and a reading that leaves little brings the bound
// back down.
func (f *Figure[E, Q]) reapLocked() {
	t := f.streams.Load()
	qs, as, events := f.qs[:0], f.asked[:0], f.events[:0]
	var quiet []*entry[E]
	for _, e := range t.list {
		e.mu.Lock()
		if e.ordered {
			if n := len(e.segs); n > 0 {
				for _, s := range e.segs {
					events = append(events, s.event)
				}
				qs = append(qs, Query[E]{})
				as = append(as, asked[E]{e: e, n: n})
			}
		} else {
			for i, s := range e.segs {
				events = append(events, s.event)
				qs = append(qs, Query[E]{})
				as = append(as, asked[E]{e: e, n: 1, seg: i})
			}
		}
		if len(e.segs) == 0 {
			if e.quiet++; e.quiet >= 2 {
				quiet = append(quiet, e)
			}
		} else {
			e.quiet = 0
		}
		e.mu.Unlock()
	}
	// The events of each question, now that the slice holds them all.
	for i, k := 0, 0; i < len(qs); i++ {
		qs[i].Events = events[k : k+as[i].n]
		k += as[i].n
	}
	if len(qs) > 0 {
		f.settle(qs, as, f.queries.Query(qs))
	}
	f.reapAt.Store(2 * f.npending.Load())
	clear(as) // the entries, held by the slice no more
	var none E
	for i := range events {
		events[i] = none
	}
	f.qs, f.asked, f.events = qs, as, events
	f.drop(quiet)
}

// settle uncounts what the answers qs to the questions as show executed
// (every free asked about, where the device could not be asked: lost), and
// keeps the events reached for reuse (destroys those of other contexts).
func (f *Figure[E, Q]) settle(qs []Query[E], as []asked[E], answered bool) {
	var retired, frees int64
	var foreign []E
	spare := f.reached[:0] // events of the device's own context, for reuse
	for i := range qs {
		q, a, e := &qs[i], as[i], as[i].e
		ok := answered && !q.Gone
		e.mu.Lock()
		first, reached := 0, a.n // a lost device, or a failed query: nothing will run
		if !e.ordered {
			first = a.seg
		}
		if ok {
			reached = min(max(q.Reached, 0), a.n)
		}
		for j := first; j < first+reached; j++ {
			s := &e.segs[j]
			retired += s.bytes
			frees++
			switch {
			case s.foreign:
				foreign = append(foreign, s.event)
			case ok:
				spare = append(spare, s.event)
			}
			s.bytes = -1 // gone, below
		}
		if e.ordered && reached > 0 {
			e.segs = deleteGone(e.segs) // its one question
		}
		e.mu.Unlock()
	}
	// The segments answered for, out of the lists of the streams not
	// Ordered (one question per segment, in a row).
	for i := range as {
		if e := as[i].e; !e.ordered && (i+1 == len(as) || as[i+1].e != e) {
			e.mu.Lock()
			e.segs = deleteGone(e.segs)
			e.mu.Unlock()
		}
	}
	if len(spare) > 0 {
		f.spareMu.Lock()
		f.spare = append(f.spare, spare...)
		f.spareMu.Unlock()
		clear(spare)
	}
	f.reached = spare[:0]
	if retired > 0 {
		f.pending.Add(-retired)
		f.Drop(retired, true)
	}
	f.npending.Add(-frees)
	for _, ev := range foreign {
		f.queries.Destroy(ev)
	}
}

// deleteGone removes the segments marked gone (bytes -1) from segs.
func deleteGone[E comparable](segs []segment[E]) []segment[E] {
	kept := segs[:0]
	for _, s := range segs {
		if s.bytes >= 0 {
			kept = append(kept, s)
		}
	}
	clear(segs[len(kept):])
	return kept
}

// drop takes from the table the entries of quiet, streams that had
// nothing pending at two readings in a row and still have nothing.
func (f *Figure[E, Q]) drop(quiet []*entry[E]) {
	if len(quiet) == 0 {
		return
	}
	f.tableMu.Lock()
	defer f.tableMu.Unlock()
	t := f.streams.Load()
	kept := make([]*entry[E], 0, len(t.list))
	for _, e := range t.list {
		e.mu.Lock()
		if len(e.segs) == 0 && e.quiet >= 2 {
			e.gone = true
		} else {
			kept = append(kept, e)
		}
		e.mu.Unlock()
	}
	f.streams.Store(newTable(kept))
}
