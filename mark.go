package memtrack

import (
	"errors"
	"fmt"
	"sync"

	"go.uber.org/atomic"
)

const (
	// MaxMarkName is the longest name of a mark, in bytes.
	MaxMarkName = 128

	// MaxMarkNames is the most names the marks of one history may have
	// (each may be used any number of times): marks name a program's
	// phases ("load weights", "prefill", "decode"), not its steps.
	MaxMarkNames = 1024
)

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
