package captures

import (
	"cmp"
	"math"
	"slices"
	"sync"
)

// State is what the driver reports of a stream's part in a capture.
type State struct {
	ID          uint64 // the capture's ID, where it is active
	Capturing   bool   // the stream takes part in a capture
	Invalidated bool   // the capture is invalidated: it ends with no graph (the driver gives it no ID)
}

// Capture is what the set counted of one capture, as a value, in bytes as
// the allocations asked for them: the caller rounds them as the driver
// reserves graph memory (RoundUp).
type Capture struct {
	ID                     uint64  // the driver's ID of the capture; 0 for none
	Stream                 uintptr // the stream the set first saw in it
	Capturing, Invalidated bool
	Allocs, Frees          int64 // its allocation and free nodes
	PeakBytes              int64 // the peak of its own allocations' bytes live at once, in node order
	OutlivingBytes         int64 // the bytes of its allocations that none of its free nodes frees
	OutlivingAllocs        int64 // how many allocations those are
}

// Pinned returns the most memory, in whole chunks, that the allocations a
// launch leaves live may pin: n allocations of bytes in all, in a graph
// that needs need (whole chunks). An allocation pins every chunk it lies
// in, wherever the driver placed it among the graph's allocations; one of
// s bytes lies in at most ceil((s-1)/chunk)+1 chunks, so that n of them
// lie in at most ceil((bytes-n)/chunk) + 2n - 1, and in no more than the
// graph's memory. A chunk below 2 rounds nothing: the bytes.
func Pinned(bytes, n, need, chunk int64) int64 {
	if n <= 0 || bytes <= 0 {
		return 0
	}
	if chunk <= 1 {
		return bytes
	}
	return min(need, satMul(satAdd(RoundUp(bytes-n, chunk)/chunk, 2*n-1), chunk))
}

// RoundUp returns n rounded up to a whole number of chunks, saturating at
// the largest such number; a chunk below 1 rounds nothing.
func RoundUp(n, chunk int64) int64 {
	if chunk <= 1 || n <= 0 {
		return n
	}
	if n > math.MaxInt64-(chunk-1) {
		return math.MaxInt64 / chunk * chunk
	}
	return (n + chunk - 1) / chunk * chunk
}

// Record is one capture's record, which a graph's buffer keeps to know
// its capture.
type Record struct {
	id                     uint64
	stream                 uintptr
	streams                []uintptr // the streams whose last capture it is
	capturing, invalidated bool
	allocs, frees          int64
	live, need             int64
	liveAllocs             int64 // its own allocations that no free node of its own frees
}

// ID returns the driver's ID of the capture.
func (r *Record) ID() uint64 { return r.id }

// Set is the captures of one device. The zero Set keeps no capture that
// ended; make one with [New].
type Set struct {
	mu       sync.Mutex
	max      int
	byID     map[uint64]*Record
	byStream map[uintptr]*Record // each stream's last capture
	ended    []*Record           // the captures that ended, the oldest first, at most max
	// forgottenBytes and forgottenAllocs are the outliving bytes, and
	// allocations, of the captures forgotten past max, less those known
	// invalidated.
	forgottenBytes, forgottenAllocs int64
}

// New returns a Set that keeps at most max captures that ended.
func New(max int) *Set { return &Set{max: max} }

// seenLocked returns the record of capture id, seen on stream, making it;
// the stream's last capture, if another, has ended. The lock is held.
func (s *Set) seenLocked(id uint64, stream uintptr) *Record {
	if s.byID == nil {
		s.byID, s.byStream = map[uint64]*Record{}, map[uintptr]*Record{}
	}
	c := s.byID[id]
	if c == nil {
		c = &Record{id: id, stream: stream, capturing: true}
		s.byID[id] = c
	}
	if prev := s.byStream[stream]; prev != c {
		if prev != nil {
			s.endLocked(prev)
		}
		s.byStream[stream] = c
		c.streams = append(c.streams, stream)
	}
	return c
}

// endLocked records that c has ended, and forgets the oldest ended
// captures past the bound. The lock is held.
func (s *Set) endLocked(c *Record) {
	if !c.capturing {
		return
	}
	c.capturing = false
	s.ended = append(s.ended, c)
	for len(s.ended) > s.max {
		old := s.ended[0]
		s.ended[0] = nil
		s.ended = s.ended[1:]
		if !old.invalidated && old.liveAllocs > 0 {
			s.forgottenBytes += old.live
			s.forgottenAllocs += old.liveAllocs
		}
		delete(s.byID, old.id)
		for _, st := range old.streams {
			if s.byStream[st] == old {
				delete(s.byStream, st)
			}
		}
	}
}

// AllocNode counts an allocation node of size bytes (as asked for) that
// capture id, seen on stream, just made, and returns the capture's record.
func (s *Set) AllocNode(id uint64, stream uintptr, size int64) *Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.seenLocked(id, stream)
	c.allocs++
	c.live += size
	c.liveAllocs++
	c.need = max(c.need, c.live)
	return c
}

// FreeNode counts a free node of capture id, seen on stream, which frees
// size bytes (as asked for) of its own allocations (0 for another graph's
// allocation).
func (s *Set) FreeNode(id uint64, stream uintptr, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.seenLocked(id, stream)
	c.frees++
	if size > 0 {
		c.live -= size
		c.liveAllocs--
	}
}

// Invalidated records that the driver invalidated capture id, seen on
// stream, which the caller learned by its ID (a node the driver refused
// in it).
func (s *Set) Invalidated(id uint64, stream uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seenLocked(id, stream).invalidated = true
}

// Outliving returns what the outliving allocations of every capture
// counted may pin, but those known invalidated, in whole chunks: each kept
// capture's Pinned, and for those forgotten past the set's bound, whose
// bytes and allocations it keeps summed, ceil(bytes/chunk) plus two chunks
// an allocation, at least the sum of theirs. A chunk below 2 rounds
// nothing: the bytes.
func (s *Set) Outliving(chunk int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.forgottenBytes
	if chunk > 1 {
		n = satAdd(RoundUp(n, chunk), satMul(2*s.forgottenAllocs, chunk))
	}
	for _, c := range s.byID {
		if !c.invalidated {
			n = satAdd(n, Pinned(c.live, c.liveAllocs, RoundUp(c.need, chunk), chunk))
		}
	}
	return n
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// OnStream returns the capture that stream takes part in, as the driver
// reported it (st), or the stream's last one; the zero Capture but for its
// Stream where there is none. A stream in an invalidated capture, which
// the driver names by no ID, reads as such, and no record moves: the
// stream's last capture may be it, or may have ended before it began.
func (s *Set) OnStream(stream uintptr, st State) Capture {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *Record
	switch {
	case st.ID != 0:
		c = s.seenLocked(st.ID, stream)
	case st.Invalidated:
		return Capture{Stream: stream, Capturing: true, Invalidated: true}
	case s.byStream != nil:
		c = s.byStream[stream]
		if c != nil && !st.Capturing {
			s.endLocked(c)
		}
	}
	if c == nil {
		return Capture{Stream: stream}
	}
	return c.value()
}

// List returns the captures kept, the oldest (by ID) first, each as the
// set last saw it: a capture that ended unseen reads in progress until its
// stream is seen again (OnStream, or a node of another capture on it).
// It asks nothing of the streams: a stream's handle is the program's, which
// may have destroyed it, and no call may be made with it but where the
// program passes it.
func (s *Set) List() []Capture {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Capture, 0, len(s.byID))
	for _, c := range s.byID {
		out = append(out, c.value())
	}
	slices.SortFunc(out, func(a, b Capture) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// value returns c as a Capture. The lock is held.
func (c *Record) value() Capture {
	return Capture{ID: c.id, Stream: c.stream, Capturing: c.capturing, Invalidated: c.invalidated,
		Allocs: c.allocs, Frees: c.frees, PeakBytes: c.need, OutlivingBytes: c.live, OutlivingAllocs: c.liveAllocs}
}
