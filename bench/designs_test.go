package bench

import (
	"errors"
	"runtime"
	"sync"
	// sync/atomic, as package tracker, whose designs these are: 64-bit
	// words aligned on 32-bit platforms, plain words on the hot paths.
	"sync/atomic"

	"github.com/memtrack/memtrack/tracker"
)

// pad separates the per-device structs of the designs below: 128 bytes, so
// that two devices never share a cache line nor an adjacent-line prefetch
// pair on any platform. It is at least tracker's own padding, so it can only
// favour these designs over memtrack's.
type pad [128]byte

// The designs refuse what tracker refuses, with errors of their own that
// allocate nothing.
var (
	errInvalidSize = errors.New("bench: size must be positive")
	errCapacity    = errors.New("bench: counter capacity exceeded")
	errFreeExceeds = errors.New("bench: free exceeds the amount held")
	errLimit       = errors.New("bench: memory limit exceeded")
)

// usage is one device's current figure and peak as plain integers, with the
// checks of tracker.Counter. It is not safe for concurrent use: the designs
// below guard it with a mutex.
type usage struct{ cur, peak int64 }

func (u *usage) alloc(n int64) error {
	switch {
	case n <= 0:
		return errInvalidSize
	case n > tracker.MaxCount-u.cur:
		return errCapacity
	}
	u.cur += n
	u.peak = max(u.peak, u.cur)
	return nil
}

func (u *usage) free(n int64) error {
	switch {
	case n <= 0:
		return errInvalidSize
	case n > u.cur:
		return errFreeExceeds
	}
	u.cur -= n
	return nil
}

// mapCounters is the design of memtrack's original proposal: one global
// mutex over a map from device ordinal to current/peak. Values are pointers,
// so an update costs one map lookup (the faster way to write it).
type mapCounters struct {
	mu sync.Mutex
	m  map[int]*usage
}

// newMapCounters returns a mapCounters holding devices 0 to devices-1, so
// that the benchmarks measure the steady state, not the first use.
func newMapCounters(devices int) *mapCounters {
	c := &mapCounters{m: make(map[int]*usage, devices)}
	for i := range devices {
		c.m[i] = new(usage)
	}
	return c
}

func (c *mapCounters) alloc(dev int, n int64) error {
	c.mu.Lock()
	err := c.m[dev].alloc(n)
	c.mu.Unlock()
	return err
}

func (c *mapCounters) free(dev int, n int64) error {
	c.mu.Lock()
	err := c.m[dev].free(n)
	c.mu.Unlock()
	return err
}

// load returns the current figure and the peak of dev.
func (c *mapCounters) load(dev int) (current, peak int64) {
	c.mu.Lock()
	u := *c.m[dev]
	c.mu.Unlock()
	return u.cur, u.peak
}

// mutexCounter is PyTorch's design reduced to what tracker.Counter keeps: a
// mutex per device over plain int64 current/peak. Use one per device, in a
// slice: the padding keeps devices off each other's cache lines.
type mutexCounter struct {
	mu sync.Mutex
	u  usage
	_  pad
}

func (c *mutexCounter) alloc(n int64) error {
	c.mu.Lock()
	err := c.u.alloc(n)
	c.mu.Unlock()
	return err
}

func (c *mutexCounter) free(n int64) error {
	c.mu.Lock()
	err := c.u.free(n)
	c.mu.Unlock()
	return err
}

// load returns the current figure and the peak.
func (c *mutexCounter) load() (current, peak int64) {
	c.mu.Lock()
	u := c.u
	c.mu.Unlock()
	return u.cur, u.peak
}

// mutexRecord is PyTorch's DeviceCachingAllocator statistics: a mutex per
// device over plain integers, holding every statistic tracker.Record keeps,
// with its checks (limit, capacity, frees of more than is held).
type mutexRecord struct {
	mu sync.Mutex
	s  tracker.Stats
	_  pad
}

func (r *mutexRecord) alloc(n int64) error {
	if n <= 0 {
		return errInvalidSize
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.s
	switch {
	case s.Limit > 0 && n > s.Limit-s.Tracked:
		s.FailedAllocs++
		return errLimit
	case n > tracker.MaxBytes-s.Tracked, s.Buffers >= tracker.MaxBuffers:
		s.FailedAllocs++
		return errCapacity
	}
	s.Tracked += n
	s.Buffers++
	s.AllocBytes += n
	s.Allocs++
	s.PeakTracked = max(s.PeakTracked, s.Tracked)
	s.PeakBuffers = max(s.PeakBuffers, s.Buffers)
	return nil
}

func (r *mutexRecord) free(n int64) error {
	if n <= 0 {
		return errInvalidSize
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.s
	if n > s.Tracked || s.Buffers == 0 {
		return errFreeExceeds
	}
	s.Tracked -= n
	s.Buffers--
	s.FreedBytes += n
	s.Frees++
	return nil
}

func (r *mutexRecord) setLimit(limit int64) {
	r.mu.Lock()
	r.s.Limit = limit
	r.mu.Unlock()
}

// snapshot returns all the statistics.
func (r *mutexRecord) snapshot() tracker.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s
}

// packedCounter is tracker.Counter's algorithm, line for line (the same
// fast paths, the same slow paths), without its padding: the current figure
// and the peak share a cache line, and in a slice four devices share one
// more. It shows what the padding buys. Keep it in step with
// tracker.Counter: TestCountersAgree checks that it reports the same
// figures, and accepts and refuses the same steps.
type packedCounter struct {
	_    [0]atomic.Int64 // 64-bit alignment on 32-bit platforms
	cur  int64           // atomic
	peak int64           // atomic
}

// packedFastMax is tracker's fastMax: the largest size the add-based fast
// paths take.
const packedFastMax = 1 << 24

func (c *packedCounter) alloc(n int64) error {
	var v int64
	if uint64(n-1) < packedFastMax {
		v = atomic.AddInt64(&c.cur, n)
		if uint64(v) <= tracker.MaxCount && v <= atomic.LoadInt64(&c.peak) {
			return nil
		}
	}
	return c.allocSlow(n, v)
}

func (c *packedCounter) allocSlow(n, v int64) error {
	if uint64(n-1) < packedFastMax {
		if uint64(v) <= tracker.MaxCount {
			raise(&c.peak, v)
			return nil
		}
		atomic.AddInt64(&c.cur, -n)
	}
	if n <= 0 {
		return errInvalidSize
	}
	for {
		o := c.current()
		if n > tracker.MaxCount-o {
			return errCapacity
		}
		if atomic.CompareAndSwapInt64(&c.cur, o, o+n) {
			raise(&c.peak, o+n)
			return nil
		}
	}
}

func (c *packedCounter) free(n int64) (err error) {
	if uint64(n-1) < packedFastMax && uint64(atomic.AddInt64(&c.cur, -n)) <= tracker.MaxCount {
		return
	}
	return c.freeSlow(n)
}

func (c *packedCounter) freeSlow(n int64) error {
	if n <= 0 {
		return errInvalidSize
	}
	if uint64(n-1) < packedFastMax {
		if w := atomic.AddInt64(&c.cur, n); uint64(w) <= tracker.MaxCount {
			raise(&c.peak, w)
		}
	}
	for {
		o := c.current()
		if n > o {
			return errFreeExceeds
		}
		if atomic.CompareAndSwapInt64(&c.cur, o, o-n) {
			return nil
		}
	}
}

// current returns the current figure, waiting out a refused change that is
// being taken back.
func (c *packedCounter) current() int64 {
	for {
		if v := atomic.LoadInt64(&c.cur); uint64(v) <= tracker.MaxCount {
			return v
		}
		runtime.Gosched()
	}
}

// load returns the current figure and the peak.
func (c *packedCounter) load() (current, peak int64) {
	current = c.current()
	return current, max(atomic.LoadInt64(&c.peak), current)
}

// raise lifts p to v if v is higher, as tracker's raise does.
func raise(p *int64, v int64) {
	for {
		o := atomic.LoadInt64(p)
		if v <= o || atomic.CompareAndSwapInt64(p, o, v) {
			return
		}
	}
}

// atomicSlot is the floor of the parallel benchmarks: one int64 per device,
// padded, moved by raw atomic adds.
type atomicSlot struct {
	v atomic.Int64
	_ pad
}

// rawPeak is the floor of tracker.Counter's pair under contention: the raw
// atomic add pair plus the peak check, with the current figure and the peak
// on cache lines of their own as in Counter, and no range checks.
type rawPeak struct {
	_    [0]atomic.Int64 // 64-bit alignment on 32-bit platforms
	cur  int64           // atomic
	_    [64 - 8]byte
	peak int64 // atomic
	_    [128 - 8]byte
}

func (c *rawPeak) pair(n int64) {
	if v := atomic.AddInt64(&c.cur, n); v > atomic.LoadInt64(&c.peak) {
		raise(&c.peak, v)
	}
	atomic.AddInt64(&c.cur, -n)
}

// rawRecord is the floor of tracker.Record's pair: as many atomic adds as
// Record's fast paths perform (two in Record.Alloc, the bytes and the
// counts; three in Record.Free, the bytes, the freed bytes and the
// counts), in the same order, on separate words of one cache line, with no
// check and no load.
type rawRecord struct {
	_                    [0]atomic.Int64 // 64-bit alignment on 32-bit platforms
	_                    [64]byte
	bytes, counts, freed int64 // atomic
	_                    [128 - 24]byte
}

func (r *rawRecord) pair(n int64) {
	atomic.AddInt64(&r.bytes, n)
	atomic.AddInt64(&r.counts, 1)
	atomic.AddInt64(&r.bytes, -n)
	atomic.AddInt64(&r.freed, n)
	atomic.AddInt64(&r.counts, 1<<32-1)
}
