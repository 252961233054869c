package held

// Querier is how a [Figure] learns that its frees in stream order have
// executed: the driver's queries of streams and of events recorded on
// them, bound to the device whose figure it is. The Figure calls it with
// one reading at a time.
type Querier[E comparable] interface {
	// Query asks the driver, in one call, how far each stream of qs has
	// come, and writes each one's answer into it (see [Query]). It
	// returns false where the device cannot be asked (it is lost):
	// nothing will run on it again, and every free counts as executed.
	// The slice, and the Events in it, are the Figure's, not to be kept.
	Query(qs []Query[E]) bool
	// Destroy destroys e, an event the Figure keeps no more.
	Destroy(e E)
}

// Query is a reading's question of one stream, and its answer.
type Query[E comparable] struct {
	Stream  uintptr // the stream's handle (Stream.Handle)
	Context uintptr // the stream's context (Stream.Context)
	// Events are events recorded on the stream, each after frees, in the
	// order the stream reaches them. Ask how many of them, from the
	// oldest, the stream has reached: the newest first, every older one
	// being reached where it is (an event captures all the work enqueued
	// on its stream before it).
	Events []E
	// Ask says that frees were enqueued on the stream after the last of
	// Events (or where there are none): where the stream has reached all
	// of Events, ask whether it has run all its work, those frees with
	// it.
	Ask bool
	// Record says, with Ask, that where the stream has not reached all of
	// Events, or has not run all its work, an event is to be recorded on
	// it after those frees: Spare, or, where Spare is the zero E, a new
	// one of its context. Neither a query nor a record is made of a
	// stream that takes part in a capture: what is enqueued there is the
	// graph's.
	Record bool
	Spare  E

	// The answer.

	// Reached is how many of Events, from the oldest, the stream has
	// reached.
	Reached int
	// Idle says, where Ask, that the stream had run all the work
	// enqueued on it: every free of it counted so far has executed.
	Idle bool
	// Recorded is, where Record and not Idle, the event recorded after
	// the frees: Spare, or a new one; the zero E where none was.
	Recorded E
	// Gone says that a query failed (the stream or its context is
	// gone, or the device met a sticky error): every free of the stream
	// counts as executed, and its events are not to be recorded again.
	Gone bool
}

// MaxWaiting is how many events a stream keeps awaiting it: a reading that
// finds a stream with as many events of its not reached records no other
// (it still asks whether the stream is idle), and the frees since wait
// for a later one.
const MaxWaiting = 4

// PendingBound is how many frees of streams not Ordered, each with its
// event, may wait before [Figure.FreedWithEvent] reads itself.
const PendingBound = 64

// asked is what a reading asked of one entry: of an Ordered stream, its
// first marked segments (their events); of a stream not Ordered, the one
// segment seg.
type asked[E comparable] struct {
	e      *entry[E]
	marked int // Ordered: the segments whose events were asked about
	seg    int // not Ordered: the segment asked about
}

// reap uncounts the pending frees that a reading learns have executed,
// where there are any.
func (f *Figure[E, Q]) reap() {
	if f.pending.Load() == 0 {
		return
	}
	f.reapMu.Lock()
	f.reapLocked()
	f.reapMu.Unlock()
}

// reapLocked is reap, with reapMu held. It seals each stream's frees
// counted since the last reading into a segment, asks the driver in one
// call about each stream with segments (Query), and uncounts what the
// answers show executed; the streams' entries stay unlocked while the
// driver is asked, so that frees and allocations go on.
func (f *Figure[E, Q]) reapLocked() {
	t := f.streams.Load()
	qs, as, events := f.qs[:0], f.asked[:0], f.events[:0]
	var quiet []*entry[E]
	for _, e := range t.list {
		e.mu.Lock()
		if e.ordered {
			marked := e.marked()
			if e.open > 0 {
				if marked == len(e.segs) {
					e.segs = append(e.segs, segment[E]{})
				}
				e.segs[marked].bytes += e.open // sealed: no event recorded after it yet
				e.open = 0
			}
			if len(e.segs) > 0 {
				q := Query[E]{Stream: e.handle, Context: e.ctx, Ask: marked < len(e.segs)}
				q.Record = q.Ask && marked < MaxWaiting
				if k := len(e.spares); q.Record && k > 0 {
					q.Spare = e.spares[k-1]
					e.spares = e.spares[:k-1]
				}
				for _, s := range e.segs[:marked] {
					events = append(events, s.event)
				}
				qs = append(qs, q)
				as = append(as, asked[E]{e: e, marked: marked})
			}
		} else {
			for i, s := range e.segs {
				events = append(events, s.event)
				qs = append(qs, Query[E]{Stream: e.handle, Context: e.ctx})
				as = append(as, asked[E]{e: e, marked: 1, seg: i})
			}
		}
		if len(e.segs) == 0 && e.open == 0 {
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
		qs[i].Events = events[k : k+as[i].marked]
		k += as[i].marked
	}
	f.qs, f.asked, f.events = qs, as, events
	if len(qs) > 0 {
		f.settle(qs, as, f.queries.Query(qs))
	}
	f.drop(quiet)
}

// settle uncounts what the answers qs to the questions as show executed
// (every free asked about, where the device could not be asked: lost).
func (f *Figure[E, Q]) settle(qs []Query[E], as []asked[E], answered bool) {
	var none E
	var retired, unordered int64
	for i := range qs {
		q, a, e := &qs[i], as[i], as[i].e
		ok := answered && !q.Gone
		e.mu.Lock()
		if !e.ordered {
			if s := &e.segs[a.seg]; !ok || q.Reached > 0 {
				retired += s.bytes
				unordered++
				if ok {
					f.PutSpare(s.event)
				}
				s.bytes = -1 // gone, below
			}
			e.mu.Unlock()
			continue
		}
		reached := a.marked // a lost device, or a failed query: nothing will run
		if ok && !q.Idle {
			reached = min(max(q.Reached, 0), a.marked)
		}
		for _, s := range e.segs[:reached] {
			retired += s.bytes
			if ok {
				e.spares = append(e.spares, s.event)
			}
		}
		switch {
		case !q.Ask:
		case !ok || q.Idle: // the sealed segment, without an event, executed
			retired += e.segs[a.marked].bytes
			reached++
		case q.Record && q.Recorded != none:
			e.segs[a.marked].event = q.Recorded
		}
		if q.Spare != none && (!answered || q.Recorded != q.Spare) {
			e.spares = append(e.spares, q.Spare) // asked for, not recorded
		}
		if !ok {
			// Nothing will run on the stream: every free of it is done
			// with, those counted since the question too.
			for _, s := range e.segs[reached:] {
				retired += s.bytes
			}
			reached = len(e.segs)
			retired += e.open
			e.open = 0
		}
		e.segs = e.segs[:copy(e.segs, e.segs[reached:])]
		e.mu.Unlock()
	}
	// The segments of streams not Ordered that were answered for.
	for i := range qs {
		if e := as[i].e; !e.ordered && (i+1 == len(qs) || as[i+1].e != e) {
			e.mu.Lock()
			e.segs = slicesDeleteGone(e.segs)
			e.mu.Unlock()
		}
	}
	if retired > 0 {
		f.pending.Add(-retired)
		f.Drop(retired, true)
	}
	f.unordered.Add(-unordered)
}

// slicesDeleteGone removes the segments marked gone (bytes -1) from segs.
func slicesDeleteGone[E comparable](segs []segment[E]) []segment[E] {
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
// nothing pending at two readings in a row and still have nothing, and
// destroys their events.
func (f *Figure[E, Q]) drop(quiet []*entry[E]) {
	if len(quiet) == 0 {
		return
	}
	var spares []E
	f.tableMu.Lock()
	t := f.streams.Load()
	kept := make([]*entry[E], 0, len(t.list))
	for _, e := range t.list {
		e.mu.Lock()
		if len(e.segs) == 0 && e.open == 0 && e.quiet >= 2 {
			e.gone = true
			spares = append(spares, e.spares...)
			e.spares = nil
		} else {
			kept = append(kept, e)
		}
		e.mu.Unlock()
	}
	f.streams.Store(newTable(kept))
	f.tableMu.Unlock()
	for _, s := range spares {
		f.queries.Destroy(s)
	}
}
