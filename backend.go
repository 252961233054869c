package memtrack

import (
	"fmt"
	"sync"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// backend is the seam between the accounting in this package and one kind of
// memory. Implementations stay thin: ordinals, sizes, limits, counters and
// double frees are all checked above them, once for every kind.
type backend interface {
	// devices returns how many devices of this kind the process reaches,
	// or an error that says why it reaches none.
	devices() (int, error)
	// alloc allocates size > 0 bytes on device ordinal.
	alloc(ordinal int, size int64) (memory, error)
	// free releases m, which alloc returned for device ordinal.
	free(ordinal int, m memory) error
	// memInfo returns what the OS or driver reports for device ordinal.
	memInfo(ordinal int) (free, total int64, err error)
}

// memory is one allocation as a backend describes it.
type memory struct {
	ptr      uintptr // device address or the backend's handle; 0 for Go memory
	host     []byte  // host-visible view of the memory; nil if there is none
	reserved int64   // bytes the backend really reserved, if it rounds up; else 0
	pooled   bool    // allocated in stream order from a CUDA memory pool (cuda_stream.go)
}

// kindState is the device table of one kind: its backend, the number of its
// devices (or why there are none) and the per-ordinal records.
type kindState struct {
	kind    Kind
	b       backend
	n       int
	err     error
	records tracker.Table
	sites   siteTable // recorders of allocation sites (sites.go)
	tracked addrIndex // addresses of Tracked handles (track.go)
}

// tables holds one kindState per kind, created on first use, and the
// kind's recorded histories (history.go), which outlive a kindState so that
// Free reaches them in one load. These and the records inside are the
// package's only global state.
var tables [numKinds]struct {
	mu      sync.Mutex
	p       atomic.Pointer[kindState]
	history historyTable
}

// stateOf returns the device table of k, creating it (and so initialising
// the backend) on first use.
func stateOf(k Kind) *kindState {
	t := &tables[k]
	if s := t.p.Load(); s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.p.Load(); s != nil {
		return s
	}
	s := newKindState(k, newBackend(k))
	t.p.Store(s)
	return s
}

func newKindState(k Kind, b backend) *kindState {
	s := &kindState{kind: k, b: b}
	s.n, s.err = b.devices()
	if s.err != nil {
		s.n = 0
	}
	return s
}

func newBackend(k Kind) backend {
	switch k {
	case KindCUDA:
		return newCUDABackend()
	case KindMetal:
		return newMetalBackend()
	default:
		return newCPUBackend()
	}
}

// record returns the record of ordinal i, checking that the device exists.
func (s *kindState) record(i int) (*tracker.Record, error) {
	if s.err != nil {
		return nil, s.err
	}
	if r := s.records.Lookup(i); r != nil {
		return r, nil
	}
	if i < 0 || i >= s.n {
		return nil, fmt.Errorf("%w: %v:%d, this machine has %d %v device(s)", ErrInvalidOrdinal, s.kind, i, s.n, s.kind)
	}
	return s.records.Record(i)
}

// unbuilt is the backend of a kind whose build tag was not given.
type unbuilt struct {
	kind Kind
	note string // what else the build needs, if anything
}

func (u unbuilt) error() error {
	return fmt.Errorf("%w: the %v backend is compiled only with -tags %s%s; rebuild with go build -tags %s",
		ErrBackendNotBuilt, u.kind, u.kind.buildTag(), u.note, u.kind.buildTag())
}

func (u unbuilt) devices() (int, error)                      { return 0, u.error() }
func (u unbuilt) alloc(int, int64) (memory, error)           { return memory{}, u.error() }
func (u unbuilt) free(int, memory) error                     { return u.error() }
func (u unbuilt) memInfo(int) (free, total int64, err error) { return 0, 0, u.error() }
