package memtrack

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/memtrack/memtrack/internal/histring"
	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// MaxHistoryEntries is the most events [HistoryRecorder.Enable] keeps
// per device: 4 Mi events, 256 MiB of ring at 64 bytes an event (and 32 MiB
// more once allocation sites are recorded).
const MaxHistoryEntries = 1 << 22

// HistoryAction is what happened in a [HistoryEvent].
type HistoryAction uint8

// The actions a history records.
const (
	HistoryAlloc       HistoryAction = iota + 1 // a buffer was allocated
	HistoryFree                                 // a buffer was freed
	HistoryLimit                                // an allocation was refused by the memory limit
	HistoryOutOfMemory                          // an allocation was refused by the device (or the record's capacity)
	HistoryFailed                               // an allocation failed in the backend for another reason
	HistoryMark                                 // a named instant (HistoryRecorder.Mark)
	HistoryBegin                                // the start of a named span (HistoryRecorder.BeginSpan)
	HistoryEnd                                  // the end of a span (Span.End)
)

var historyActionNames = [...]string{
	HistoryAlloc:       "alloc",
	HistoryFree:        "free",
	HistoryLimit:       "limit",
	HistoryOutOfMemory: "oom",
	HistoryFailed:      "failed",
	HistoryMark:        "mark",
	HistoryBegin:       "begin",
	HistoryEnd:         "end",
}

// String returns "alloc", "free", "limit", "oom", "failed", "mark",
// "begin" or "end".
func (a HistoryAction) String() string {
	if int(a) < len(historyActionNames) && historyActionNames[a] != "" {
		return historyActionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Refused reports whether the action is an allocation that did not happen:
// [HistoryLimit], [HistoryOutOfMemory] or [HistoryFailed].
func (a HistoryAction) Refused() bool { return a >= HistoryLimit && a <= HistoryFailed }

// HistoryEvent is one allocation, free or refused allocation on a device,
// or one of its marks ([HistoryRecorder.Mark], [HistoryRecorder.BeginSpan]).
type HistoryEvent struct {
	// Seq numbers the device's events from 0, in the order they took their
	// place in the history; a number missing between two events is a gap.
	Seq    uint64
	Time   time.Time     // when it happened (with a monotonic reading)
	Action HistoryAction // what happened
	Size   int64         // the bytes allocated, freed or asked for
	// Tracked is the device's tracked bytes ([Device.MemoryAllocated]) read
	// just after the event. With no other allocation or free running on the
	// device at once it is exact; under concurrency it is a figure the
	// device held at some moment between the event and its recording.
	Tracked int64
	// Stack is the allocation site of the buffer, innermost frame first, as
	// [Site].Stack, when [SiteRecorder.Enable] recorded it (only
	// sampled allocations have one, unless [SiteRecorder.SetRate]
	// set the rate to 1); nil otherwise. Events of one site share the slice: do not modify it.
	Stack []uintptr
	// SiteBytes is what the event added to (an allocation) or took from (a
	// free) the bytes of its allocation site, [Site].Bytes: Size scaled by
	// the sampling weight the buffer was recorded with (Size itself at
	// rate 1), rounded to the byte; 0 where the buffer has no recorded
	// site. An event whose site is [OtherSite] has a SiteBytes and no
	// Stack. Undoing the events' SiteBytes from the newest walks the
	// figures of [SiteRecorder.Snapshot] back in time.
	SiteBytes int64
	// Stream is the stream of a stream-ordered event ([Device.AllocAsync],
	// [Buffer.FreeAsync]); 0, the default stream, for every other event.
	Stream uintptr
	// Category is the category of the buffer or the request
	// ([Category.Alloc]), or "" for none, and CategoryTracked the
	// category's tracked bytes read just after the event (as Tracked is
	// the device's); 0 for none.
	Category        string
	CategoryTracked int64
	// Mark is the name of a mark ([HistoryMark], [HistoryBegin],
	// [HistoryEnd]); "" for every other event. Span pairs a span's begin
	// and end: it is the Seq of the span's [HistoryBegin], in both; 0 for
	// every other event. A mark's Size is 0 and its Tracked the device's
	// tracked bytes at the mark.
	Mark string
	Span uint64
}

// HistoryGap is a run of events missing between two recorded ones: a viewer
// must not draw a line from the event before it to the event after it.
// Events go missing when a writer was lapped (the ring wrapped past it
// before it finished), or when its slot was being read at that moment.
type HistoryGap struct {
	After, Before uint64    // the Seq of the events either side
	Missing       uint64    // Before - After - 1
	From, To      time.Time // the times of the events either side
}

// History is the recorded allocation history of one device, the oldest
// event first.
type History struct {
	Device     Device
	MaxEntries int       // the most events the ring keeps
	Start      time.Time // when recording began
	Events     []HistoryEvent
	Gaps       []HistoryGap
	// Overwritten counts the events older than Events that the ring let go,
	// Lost the events that never made it into the ring (see [HistoryGap]),
	// both since recording began.
	Overwritten, Lost uint64
}

// HistoryRecorder is the memory history of one device: its controls and
// its reads. Obtain it with [Device.History]; it is a small comparable
// value, as [Device] is.
type HistoryRecorder struct{ dev Device }

// History returns the recorder of the device's memory history.
func (d Device) History() HistoryRecorder { return HistoryRecorder{dev: d} }

// Device returns the device whose history it records.
func (r HistoryRecorder) Device() Device { return r.dev }

// Enable starts recording every allocation, free and refused
// allocation on the device into a ring of maxEntries events (1 <=
// maxEntries <= [MaxHistoryEntries]): once full, each event replaces the
// oldest. The ring takes 64 bytes an event, allocated and touched now, holding no
// pointer (so the garbage collector does not scan it), and 8 bytes more an
// event once an event has an allocation site; recording adds no lock and no
// allocation to Alloc and Free. Read it with
// [HistoryRecorder.Snapshot]. On a device already recording with the same
// maxEntries it changes nothing; with another it starts a new, empty ring.
// Recording is the model of PyTorch's
// torch.cuda.memory._record_memory_history(max_entries=...).
func (r HistoryRecorder) Enable(maxEntries int) error {
	d := r.dev
	if maxEntries < 1 || maxEntries > MaxHistoryEntries {
		return fmt.Errorf("%w: history of %d events on %v: want 1 to %d", ErrInvalidArgument, maxEntries, d, MaxHistoryEntries)
	}
	s, _, err := d.lookup(use)
	if err != nil {
		return err
	}
	s.updateHook(d.ordinal, historySlot, func(old hook) hook {
		if h, ok := old.(*history); ok && h.ring.Len() == maxEntries {
			return h
		}
		return newHistory(maxEntries)
	})
	return nil
}

// Disable stops recording the device's history and drops what
// was recorded. Recording that is off stays off.
func (r HistoryRecorder) Disable() {
	d := r.dev
	if s, _, err := d.lookup(start); err == nil { // off stays off: nothing registered
		s.setHook(d.ordinal, historySlot, nil)
	}
}

// Snapshot returns the device's recorded events, the oldest first,
// with the gaps between them. It fails with an error matching
// [ErrHistoryNotRecorded] unless [HistoryRecorder.Enable] was called.
// Reading does not stop recording; an event being written as it reads is
// left out (and, if newer events were read, reported as a gap). Readers
// of one device take turns, so that no reader leaves out an event that
// another is reading.
func (r HistoryRecorder) Snapshot() (History, error) {
	d := r.dev
	h, err := r.recorded()
	if err != nil {
		return History{Device: d}, err
	}
	hist := h.snapshot(d.categoryNamer())
	hist.Device = d
	return hist, nil
}

// Range gives f the device's recorded events one by one, the
// oldest first, as [HistoryRecorder.Snapshot] returns them, until f returns
// false, and returns the history without its Events: its Gaps (between the
// events f was given), Overwritten and Lost. It reads the ring in place, so
// that a reader that keeps little of each event needs memory for what it
// keeps only, however long the history (package
// github.com/memtrack/memtrack/web plots a ring of millions of events this
// way). Recording goes on while it reads, as with MemoryHistory; readers
// of one device take turns for the whole read, so f must not read the
// device's history itself. It fails as MemoryHistory does, calling f never.
func (r HistoryRecorder) Range(f func(HistoryEvent) bool) (History, error) {
	d := r.dev
	if f == nil {
		return History{Device: d}, fmt.Errorf("%w: History().Range of %v: nil function", ErrInvalidArgument, d)
	}
	h, err := r.recorded()
	if err != nil {
		return History{Device: d}, err
	}
	hist := h.each(d.categoryNamer(), nil, f)
	hist.Device = d
	return hist, nil
}

// recorded returns the device's history, or an error matching
// ErrHistoryNotRecorded where it records none. It registers nothing.
func (r HistoryRecorder) recorded() (*history, error) {
	d := r.dev
	s, _, err := d.lookup(start)
	if err != nil {
		return nil, err
	}
	if h := s.historyOf(d.ordinal); h != nil {
		return h, nil
	}
	return nil, fmt.Errorf("%w on %v: call Device.History().Enable first", ErrHistoryNotRecorded, d)
}

// historyOf returns the history of device ordinal, or nil if it records
// none.
func (s *deviceTable) historyOf(ordinal int) *history {
	h, _ := s.hookOf(ordinal, historySlot).(*history)
	return h
}

// historySlot is the memory history's slot (hooks.go): after the
// allocation sites', whose marks it records.
const historySlot = 1

// history is one device's ring of events (histring.Ring), whose sites
// are the allocation sites of the events' buffers: the device's hook while
// it records.
type history struct {
	ring  *histring.Ring[site]
	marks markNames // the names of its marks (HistoryRecorder.Mark)
}

func newHistory(n int) *history { return &history{ring: histring.New[site](n)} }

// allocated, released and refused record the allocation a of r, counted
// in the ledger l, with its site, if recorded; the release of a,
// uncounted from l, on stream for one in stream order (nothing where the
// ledger refused to uncount it: nothing moved); and the refusal of r,
// whose error err is a limit's (tracker.ErrLimitExceeded, or nil for the
// path's own check of the limits), an *OutOfMemoryError or another
// failure. The events hold the figures of the ledger just after.
func (h *history) allocated(a *allocation, l ledger, stream Stream, _ int, _ bool) {
	h.put(HistoryAlloc, a.size, l.rec.Tracked(), siteOf(a), stream, a.cat, l.categoryTracked(), 0)
}

func (h *history) released(size int64, mark unsafe.Pointer, cat uint8, l ledger, stream Stream) {
	if l.rec != nil {
		h.put(HistoryFree, size, l.rec.Tracked(), (*site)(mark), stream, cat, l.categoryTracked(), 0)
	}
}

func (h *history) refused(r request, l ledger, err error) {
	var oom *OutOfMemoryError
	act := HistoryFailed
	switch {
	case err == nil || errors.Is(err, tracker.ErrLimitExceeded):
		act = HistoryLimit
	case errors.As(err, &oom), errors.Is(err, tracker.ErrCapacity):
		act = HistoryOutOfMemory
	}
	h.put(act, r.size, l.rec.Tracked(), nil, 0, r.cat, l.categoryTracked(), 0)
}

// put writes one event into the ring, or counts it lost, and returns its
// number: the device's figure cur after it, and, in category cat (0:
// none), the category's ccur; mark is a mark's name (markNames), 0 for
// none.
func (h *history) put(a HistoryAction, size, cur int64, s *site, stream Stream, cat uint8, ccur int64, mark uint32) uint64 {
	return h.ring.Record(uint8(a), size, cur, s, uintptr(stream), cat, ccur, mark)
}

// snapshot copies the events still in the ring, the oldest first, and
// the gaps between them, with the events' categories named by name.
func (h *history) snapshot(name func(idx uint8) string) History {
	var events []HistoryEvent
	out := h.each(name, func(n uint64) { events = make([]HistoryEvent, 0, n) }, func(e HistoryEvent) bool {
		events = append(events, e)
		return true
	})
	out.Events = events
	return out
}

// each reads the events still in the ring, the oldest first, and gives
// each to f until f returns false; before the first, it tells begin how
// many slots it will read. It returns the history without its events: the
// gaps between those f was given, and the counts. Each event's slot is
// claimed while it is copied and let go before f runs; readers take turns
// for the whole read. name names the events' categories by their index.
func (h *history) each(name func(idx uint8) string, begin func(slots uint64), f func(HistoryEvent) bool) History {
	out := History{MaxEntries: h.ring.Len(), Start: h.ring.Start()}
	stacks := make(map[*uintptr][]uintptr) // one copy of each site's stack, by its first frame
	gaps, overwritten, lost := h.ring.Read(begin, func(re histring.Event[site]) bool {
		e := HistoryEvent{
			Seq:             re.Seq,
			Time:            re.Time,
			Action:          HistoryAction(re.Action),
			Size:            re.Size,
			Tracked:         re.Tracked,
			Stream:          re.Stream,
			Category:        name(re.Category),
			CategoryTracked: re.CategoryTracked,
		}
		if re.Mark != 0 {
			h.readMark(&e, re.Mark)
		}
		if s := re.Site; s != nil {
			e.SiteBytes = int64(math.Round(s.Bytes()))
			if pcs := s.Stack(); len(pcs) > 0 {
				st, ok := stacks[&pcs[0]]
				if !ok {
					st = append([]uintptr(nil), pcs...)
					stacks[&pcs[0]] = st
				}
				e.Stack = st
			}
		}
		return f(e)
	})
	for _, g := range gaps {
		out.Gaps = append(out.Gaps, HistoryGap{After: g.After, Before: g.Before, Missing: g.Before - g.After - 1, From: g.From, To: g.To})
	}
	out.Overwritten, out.Lost = overwritten, lost
	return out
}

// ErrTooManyMarkNames: a history holds [MaxMarkNames] names of marks
// already, and a mark was given another.
var ErrTooManyMarkNames = errors.New("memtrack: too many mark names")

// Mark puts an instant called name into the device's history, where
// [HistoryRecorder.Enable] records one: a [HistoryEvent] of action
// [HistoryMark] with the device's tracked bytes at that moment, which
// package trace and the page draw on the timeline. Where no history is
// recorded it does nothing: no allocation, no lock. With a history it
// takes no lock and allocates nothing either, except the first time a name
// is used in it, which numbers the name.
//
// A name is 1 to [MaxMarkName] bytes of UTF-8 without control characters;
// anything else fails with [ErrInvalidArgument], with or without a
// history. A history holds up to [MaxMarkNames] names; a mark with
// another fails with [ErrTooManyMarkNames]. Nothing is recorded where it
// fails.
func (r HistoryRecorder) Mark(name string) error {
	d := r.dev
	h, err := d.markHistory(name)
	if h == nil {
		return err
	}
	id, err := h.marks.id(name, d)
	if err != nil {
		return err
	}
	h.put(HistoryMark, 0, d.peekTracked(), nil, 0, 0, 0, id)
	return nil
}

// Span is a named span of a device's history, from [HistoryRecorder.BeginSpan] to
// [Span.End]: a phase of the program, such as loading the weights or a
// measured pass. Spans may nest and overlap, on one goroutine or many.
// A nil *Span is the span of a device that recorded no history when it
// began: its End does nothing.
type Span struct {
	h     *history
	dev   Device
	begin uint64 // the Seq of its begin
	name  uint32 // in h.marks
	ended atomic.Bool
}

// BeginSpan puts the start of a span called name into the device's
// history, as [HistoryRecorder.Mark] puts an instant (a [HistoryEvent] of action
// [HistoryBegin]), and returns the span, whose [Span.End] puts its end.
// Where no history is recorded it returns a nil *Span, allocating nothing
// and taking no lock; with one it allocates the Span. Names and failures
// are those of Mark; where it fails it returns nil and records nothing.
func (r HistoryRecorder) BeginSpan(name string) (*Span, error) {
	d := r.dev
	h, err := d.markHistory(name)
	if h == nil {
		return nil, err
	}
	id, err := h.marks.id(name, d)
	if err != nil {
		return nil, err
	}
	sp := &Span{h: h, dev: d, name: id}
	sp.begin = h.put(HistoryBegin, 0, d.peekTracked(), nil, 0, 0, 0, id)
	return sp, nil
}

// End puts the span's end into the history it began in (a [HistoryEvent]
// of action [HistoryEnd] whose Span is the begin's Seq). It records nothing
// for a nil *Span, nor where the device's history was disabled or enabled
// anew since the span began. A second End of a span records nothing and
// fails with [ErrInvalidArgument].
func (s *Span) End() error {
	if s == nil {
		return nil
	}
	if !s.ended.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: span %q of %v ended twice", ErrInvalidArgument, s.Name(), s.dev)
	}
	if s.dev.currentHistory() == s.h {
		s.h.put(HistoryEnd, int64(s.begin), s.dev.peekTracked(), nil, 0, 0, 0, s.name)
	}
	return nil
}

// Name returns the span's name ("" for a nil *Span).
func (s *Span) Name() string {
	if s == nil {
		return ""
	}
	return s.h.marks.name(s.name)
}

// markHistory checks a mark's name and the device, and returns the
// device's history, or nil where none is recorded or the mark is refused
// (then with the error).
func (d Device) markHistory(name string) (*history, error) {
	if err := checkName("mark", name, MaxMarkName); err != nil {
		return nil, fmt.Errorf("%w: mark on %v: %v", ErrInvalidArgument, d, err)
	}
	if d.kind == 0 || d.kind >= numKinds {
		return nil, errZeroDevice(d)
	}
	return d.currentHistory(), nil
}

// currentHistory returns the device's history, or nil where none is
// recorded, reading as peek reads: registering nothing, taking no lock.
func (d Device) currentHistory() *history {
	if s := tableOf(d.kind); s != nil {
		return s.historyOf(d.ordinal)
	}
	return nil
}

// peekTracked returns the device's tracked bytes, as peek reads them.
func (d Device) peekTracked() int64 {
	if r := d.peek(); r != nil {
		return r.Tracked()
	}
	return 0
}

// markNames holds the names of one history's marks, numbered from 1 in
// the order they were first used. Both tables are copied on write, under
// mu, and read without a lock: a mark whose name is known reads one map.
type markNames struct {
	mu    sync.Mutex
	ids   atomic.Pointer[map[string]uint32]
	names atomic.Pointer[[]string] // by id-1
}

// id returns the number of name, giving it the next where it is new.
func (m *markNames) id(name string, d Device) (uint32, error) {
	if p := m.ids.Load(); p != nil {
		if id, ok := (*p)[name]; ok {
			return id, nil
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids map[string]uint32
	var names []string
	if p := m.ids.Load(); p != nil {
		if id, ok := (*p)[name]; ok {
			return id, nil
		}
		ids, names = *p, *m.names.Load()
	}
	if len(names) == MaxMarkNames {
		return 0, fmt.Errorf("%w: the history of %v has %d names of marks; %q would be one more", ErrTooManyMarkNames, d, len(names), name)
	}
	next := make(map[string]uint32, len(ids)+1)
	for k, v := range ids {
		next[k] = v
	}
	id := uint32(len(names) + 1)
	next[name] = id
	all := append(names[:len(names):len(names)], name)
	m.names.Store(&all) // before ids: a writer that sees the id finds the name
	m.ids.Store(&next)
	return id, nil
}

// name returns the name numbered id, or "" for 0 and a number not given.
func (m *markNames) name(id uint32) string {
	p := m.names.Load()
	if id == 0 || p == nil || int(id) > len(*p) {
		return ""
	}
	return (*p)[id-1]
}

// readMark completes a reader's copy e of a mark event whose name is
// numbered id: its name, and the begin's Seq that a begin and an end
// share (an end keeps it in the slot's size).
func (h *history) readMark(e *HistoryEvent, id uint32) {
	e.Mark = h.marks.name(id)
	switch e.Action {
	case HistoryBegin:
		e.Span = e.Seq
	case HistoryEnd:
		e.Span = uint64(e.Size)
	}
	e.Size = 0
}

// IsMark reports whether the action is a mark: [HistoryMark],
// [HistoryBegin] or [HistoryEnd].
func (a HistoryAction) IsMark() bool { return a >= HistoryMark && a <= HistoryEnd }
