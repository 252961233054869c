package memtrack

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leakFrom allocates size bytes on d from a frame of its own and drops the
// buffer: the known leak site of these tests.
//
//go:noinline
func leakFrom(t testing.TB, d Device, size int64) {
	_, err := d.Alloc(size)
	require.NoError(t, err)
	leftOnPurpose(d, size)
}

// leakTrackedFrom tracks size bytes without an address on d and drops the
// handle.
//
//go:noinline
func leakTrackedFrom(t testing.TB, d Device, size int64) {
	_, err := d.Track(size, 0)
	require.NoError(t, err)
	leftOnPurpose(d, size)
}

// leakSink collects the leaks a handler receives.
type leakSink struct{ ch chan Leak }

func newLeakSink() *leakSink { return &leakSink{ch: make(chan Leak, 64)} }

func (s *leakSink) handle(l Leak) { s.ch <- l }

// next collects garbage until a leak arrives; it fails the test if none
// does within the deadline (a guard, not a wait the test relies on).
func (s *leakSink) next(t testing.TB) Leak {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		select {
		case l := <-s.ch:
			return l
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("no leak reported")
	return Leak{}
}

// none collects garbage and checks that no leak arrives: the cleanups of
// every object unreachable before the collections have run when a sentinel
// object's cleanup, registered after them, has run (cleanups queued by one
// cycle run before those of a later one).
func (s *leakSink) none(t testing.TB) {
	t.Helper()
	drainCleanups(t)
	select {
	case l := <-s.ch:
		t.Fatalf("unexpected leak: %v", l)
	default:
	}
}

// drainCleanups collects garbage until the cleanup of an object that
// became unreachable after the others has run.
func drainCleanups(t testing.TB) {
	t.Helper()
	for range 3 { // cleanups that free objects may make more garbage
		done := make(chan struct{})
		func() {
			p := new([16]byte)
			runtime.AddCleanup(p, func(ch chan struct{}) { close(ch) }, done)
		}()
		collectUntil(t, done, "the cleanup of an unreachable object")
	}
}

// collectUntil collects garbage until done is closed; it fails the test if
// that takes longer than a deadline (a guard, not a wait the test relies
// on), naming what never came.
func collectUntil(t testing.TB, done <-chan struct{}, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("%s never came", what)
			}
		}
	}
}

// liveEntries returns the entries the device's bookkeeping holds.
func liveEntries(d Device) int {
	dl := slotOf[deviceLeaks](tableOf(d.kind), d.ordinal, leaksSlot, nil)
	if dl == nil {
		return 0
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	n := 0
	dl.slots.Each(func(*watched) { n++ })
	return n
}

func TestLeakWatchReportsALeakWithItsSite(t *testing.T) {
	f, ds := fakeCUDA(t, 2, 1<<30)
	d := ds[1]
	require.NoError(t, d.Sites().Enable(8))
	require.NoError(t, d.Sites().SetRate(1))
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle}))
	assert.True(t, d.Leaks().Enabled())

	before := time.Now()
	leakFrom(t, d, 4096)
	l := sink.next(t)
	assert.Equal(t, d, l.Device)
	assert.Equal(t, int64(4096), l.Size)
	assert.True(t, l.Collected)
	assert.False(t, l.Tracked)
	assert.False(t, l.Freed, "freeing is off by default")
	assert.False(t, l.AllocTime.Before(before))
	assert.Positive(t, l.Age)
	fn, file := l.Site()
	assert.Equal(t, "github.com/memtrack/memtrack.leakFrom", fn)
	assert.True(t, strings.HasPrefix(file, "leak_test.go:"), file)
	assert.Contains(t, l.String(), "4.00 KiB (4096 B) on cuda:1, allocated at github.com/memtrack/memtrack.leakFrom (leak_test.go:")

	s := d.MemoryStats()
	assert.Equal(t, int64(1), s.Leaks)
	assert.Equal(t, int64(4096), s.LeakedBytes)
	assert.Equal(t, int64(4096), s.Tracked, "a leak not freed stays counted")
	assert.Equal(t, int64(0), s.Frees)
	assert.Contains(t, s.String(), "; 0 failed allocs; 1 leaks (4.00 KiB (4096 B)); no limit")
	assert.Contains(t, d.MemorySummary(), "leaks: 1, 4.00 KiB (unreachable without a free)\n")
	used, live, _ := f.state(1)
	assert.Equal(t, int64(4096), used)
	assert.Equal(t, 1, live)
	assert.Equal(t, LeakStats{}, ds[0].Leaks().Stats(), "the other device found nothing")
	sink.none(t)
	assert.Equal(t, int64(1), d.MemoryStats().Leaks, "a leak is counted once")

	d.ResetAccumulatedMemoryStats()
	assert.Equal(t, LeakStats{}, d.Leaks().Stats(), "the leak figures are cumulative")
	d.Leaks().Disable()
	assert.False(t, d.Leaks().Enabled())
}

func TestLeakWatchFreesALeakOnce(t *testing.T) {
	f, ds := fakeCUDA(t, 2, 1<<30)
	d := ds[1]
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle, FreeLeaks: true}))
	leakFrom(t, d, 1<<20)
	l := sink.next(t)
	assert.True(t, l.Freed)
	assert.NoError(t, l.Err)
	assert.Nil(t, l.Stack, "sites are not recorded on the device")
	sink.none(t)

	s := d.MemoryStats()
	assert.Equal(t, int64(0), s.Tracked, "the freed leak is uncounted")
	assert.Equal(t, int64(1), s.Frees, "and counted as one free")
	assert.Equal(t, int64(1<<20), s.FreedBytes)
	assert.Equal(t, int64(1), s.Leaks)
	used, live, _ := f.state(1)
	assert.Equal(t, int64(0), used, "the backend freed it on its device")
	assert.Equal(t, 0, live)
	assert.Equal(t, 0, liveEntries(d))
}

func TestLeakWatchFreeFailureKeepsTheLeakCounted(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle, FreeLeaks: true}))
	f.mu.Lock()
	f.freeErrs = []error{errFakeDriver}
	f.mu.Unlock()
	leakFrom(t, d, 512)
	l := sink.next(t)
	assert.False(t, l.Freed)
	assert.ErrorIs(t, l.Err, errFakeDriver)
	s := d.MemoryStats()
	assert.Equal(t, int64(512), s.Tracked, "memory the backend did not free stays counted")
	assert.Equal(t, int64(0), s.Frees)
	assert.Equal(t, 0, liveEntries(d), "a leak's entry goes (its slot stays marked), freed or not")
}

// TestLeakWatchToggledWithLiveBuffers: a buffer is watched by the watch in
// effect at its allocation; one allocated while watching was off is never
// reported, nor one watched before watching went off and on again.
func TestLeakWatchToggledWithLiveBuffers(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle}))
	kept, err := d.Alloc(10)
	require.NoError(t, err)
	leakFrom(t, d, 11) // watched, then watching goes off before collection
	d.Leaks().Disable()
	d.Leaks().Disable() // off stays off
	leakFrom(t, d, 12)  // never watched
	sink.none(t)
	require.NoError(t, kept.Free(), "a buffer watched before stays freeable")

	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle}))
	leakFrom(t, d, 13)
	assert.Equal(t, int64(13), sink.next(t).Size, "only the buffer watched now")
	sink.none(t)
	assert.Equal(t, LeakStats{Leaks: 1, LeakedBytes: 13}, d.Leaks().Stats())
	assert.Equal(t, 0, liveEntries(d), "the entries go with the collections")
}

func TestLeakWatchReplacesTheHandler(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	first, second := newLeakSink(), newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: first.handle}))
	b, err := d.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: second.handle, FreeLeaks: true}))
	runtime.KeepAlive(b)
	b = nil
	l := second.next(t)
	assert.Equal(t, int64(100), l.Size)
	assert.True(t, l.Freed, "the new settings hold for buffers watched already")
	first.none(t)
}

func TestLeakedTrackedHandle(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle, FreeLeaks: true}))
	leakTrackedFrom(t, d, 300)
	l := sink.next(t)
	assert.True(t, l.Tracked)
	assert.False(t, l.Freed, "memory another binding owns is never freed")
	assert.Equal(t, int64(300), d.MemoryAllocated())

	// A handle with an address stays reachable through the index.
	_, err := d.Track(400, 0xdead0000) // the handle is dropped at once
	require.NoError(t, err)
	sink.none(t)
	h := KindCUDA.TrackedAt(0xdead0000)
	require.NotNil(t, h)
	require.NoError(t, h.Release())
	assert.Equal(t, int64(300), d.MemoryAllocated())
}

func TestLeakHandlerPanicIsRecovered(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	var buf bytes.Buffer
	var mu sync.Mutex
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(leakLogWriter{&mu, &buf}, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	reached := make(chan struct{})
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: func(Leak) {
		close(reached)
		panic("handler bug")
	}}))
	leakFrom(t, d, 1)
	collectUntil(t, reached, "the leak")
	drainCleanups(t)
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, buf.String(), "memtrack: the leak handler panicked")
	assert.Contains(t, buf.String(), "handler bug")
}

// leakLogWriter serialises the writes of the cleanup goroutines.
type leakLogWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l leakLogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestLeakWatchErrors(t *testing.T) {
	bad := Device{kind: numKinds}
	assert.ErrorIs(t, bad.Leaks().Enable(LeakWatch{}), ErrInvalidDevice)
	bad.Leaks().Disable()
	assert.False(t, bad.Leaks().Enabled())
	assert.Equal(t, LeakStats{}, bad.Leaks().Stats())
	_, err := bad.Leaks().StartCheck()
	assert.ErrorIs(t, err, ErrInvalidDevice)
}

// TestUnwatchedBuffersHaveNoEntry: with watching off the allocation path
// makes nothing.
func TestUnwatchedBuffersHaveNoEntry(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	b, err := ds[0].Alloc(1)
	require.NoError(t, err)
	assert.Zero(t, b.entry)
	require.NoError(t, b.Free())
	assert.Nil(t, tableOf(KindCUDA).stateOf(0, false), "no feature's state made")
}

// dropSome allocates n buffers on d, frees the even ones and drops the
// odd ones.
//
//go:noinline
func dropSome(t testing.TB, d Device, n int) {
	for i := range n {
		b, err := d.Alloc(int64(i + 1))
		if err != nil {
			t.Error(err)
			return
		}
		if i%2 == 0 {
			if err := b.Free(); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestLeakWatchUnderConcurrency: goroutines allocate on one watched device
// at once, free half their buffers and drop the others while collections
// run; every dropped buffer is found and freed once, and the figures add
// up exactly.
func TestLeakWatchUnderConcurrency(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<40)
	d := ds[0]
	var found sync.WaitGroup
	goroutines, per := 8, 200
	if testing.Short() {
		per = 20
	}
	dropped := goroutines * per / 2
	found.Add(dropped)
	var mu sync.Mutex
	var leakedBytes int64
	require.NoError(t, d.Leaks().Enable(LeakWatch{FreeLeaks: true, Handler: func(l Leak) {
		mu.Lock()
		leakedBytes += l.Size
		mu.Unlock()
		found.Done()
	}}))
	var start, done sync.WaitGroup
	start.Add(1)
	for range goroutines {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			dropSome(t, d, per)
			runtime.GC()
		}()
	}
	start.Done()
	done.Wait()
	all := make(chan struct{})
	go func() { found.Wait(); close(all) }()
	collectUntil(t, all, "every dropped buffer's leak")
	var wantBytes int64
	for i := 1; i < per; i += 2 {
		wantBytes += int64(i + 1)
	}
	wantBytes *= int64(goroutines)
	s := d.MemoryStats()
	assert.Equal(t, int64(dropped), s.Leaks)
	assert.Equal(t, wantBytes, s.LeakedBytes)
	assert.Equal(t, wantBytes, leakedBytes)
	assert.Equal(t, int64(goroutines*per), s.Frees, "every buffer freed once, by Free or as a leak")
	assert.Zero(t, s.Tracked)
	used, live, _ := f.state(0)
	assert.Zero(t, used)
	assert.Zero(t, live)
	assert.Zero(t, liveEntries(d))
	d.Leaks().Disable()
}

// TestLeakEntryGoesWhenTheRecordRefuses: a watched buffer whose record
// refuses to uncount it (the test uncounts it behind the buffer's back, as
// in TestBufferFreeReportsRecordError) is released all the same, and its
// entry leaves the leak watch, so that no entry stays claimed for ever.
func TestLeakEntryGoesWhenTheRecordRefuses(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: func(Leak) {}}))
	t.Cleanup(d.Leaks().Disable)
	b, err := d.Alloc(100)
	require.NoError(t, err)
	require.Equal(t, 1, liveEntries(d))
	rec := tableOf(KindCUDA).records.Lookup(0)
	require.NoError(t, rec.Free(100)) // the record forgets the buffer

	assert.ErrorIs(t, b.Free(), tracker.ErrFreeExceedsTracked)
	assert.Zero(t, liveEntries(d), "the released buffer's entry stays in the watch")
}
