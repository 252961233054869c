//go:build rocm

package hipdrv_test

import (
	"fmt"
	"math/bits"
	"runtime"
	"testing"

	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stream returns a new stream of device, destroyed at the test's end.
func stream(t *testing.T, device int) uintptr {
	t.Helper()
	s, r := hiptest.StreamCreate(device)
	require.Equal(t, hipdrv.Success, r)
	t.Cleanup(func() { hiptest.StreamDestroy(s) })
	return s
}

// A stream-ordered allocation and its free, on each kind of stream: the
// free records nothing, but on the per-thread stream, whose handle names
// another stream on each thread, where it records an event after the free,
// which the stream reaches once it runs the free; a reading finds each
// stream idle once it ran.
func TestAllocFreeAsync(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	for _, tc := range []struct {
		name   string
		stream uintptr
		event  bool
	}{
		{"null stream", 0, false},
		{"per-thread stream", hipdrv.StreamPerThread, true},
		{"stream of one's own", stream(t, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The per-thread stream is the thread's own, and a subtest
			// runs in a goroutine of its own: it holds its thread.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var events []hipdrv.Event
			for range 3 {
				a := hipdrv.AllocAsync(0, mib, tc.stream)
				require.Equal(t, hipdrv.Call{}, a.Call)
				require.NotZero(t, a.Ptr)
				assert.Equal(t, hipdrv.Capture{}, a.Capture)
				f := hipdrv.FreeAsync(0, a.Ptr, tc.stream, hipdrv.Event{})
				require.Equal(t, hipdrv.Call{}, f.Call)
				require.Equal(t, tc.event, !f.Event.IsZero())
				assert.False(t, f.Retired)
				if tc.event {
					events = append(events, f.Event)
				}
			}
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, tc.stream))
			var r hipdrv.Readings
			r.Add(tc.stream, events, !tc.event, !tc.event, hipdrv.Event{})
			require.Equal(t, hipdrv.Success, r.Read(0))
			n, idle, recorded, res := r.Answer(0)
			assert.Equal(t, len(events), n)
			assert.Equal(t, !tc.event, idle)
			assert.True(t, recorded.IsZero())
			assert.Equal(t, hipdrv.Success, res)
			for _, e := range events {
				hipdrv.EventDestroy(e)
			}
		})
	}
}

// mark records an event on stream s of device 0, held back (busy), by a
// reading: the question of a stream with frees after its events, which
// records one where the stream is not idle.
func mark(t *testing.T, s uintptr) hipdrv.Event {
	t.Helper()
	var r hipdrv.Readings
	r.Add(s, nil, true, true, hipdrv.Event{})
	require.Equal(t, hipdrv.Success, r.Read(0))
	_, idle, e, res := r.Answer(0)
	require.Equal(t, hipdrv.Success, res)
	require.False(t, idle, "the stream is held back")
	require.False(t, e.IsZero(), "an event recorded")
	return e
}

// How far a stream has come through the events readings recorded on it,
// asked of streams held back at every place: the newest event first, then
// bisection, so that n events cost at most 1 + ceil(log2 n) queries, and
// exactly one where all are reached; a second stream is answered apart, in
// the same call.
func TestReadingsReached(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	for n := 1; n <= 6; n++ {
		for k := 0; k <= n; k++ {
			t.Run(fmt.Sprintf("%d of %d", k, n), func(t *testing.T) {
				s, other := stream(t, 0), stream(t, 0)
				defer hiptest.ReleaseStreams()
				require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, s))
				require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, other))
				var events []hipdrv.Event
				for range k {
					events = append(events, mark(t, s))
				}
				held := mark(t, other)
				hiptest.ReleaseStreams()
				require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
				require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, other))
				require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, s))
				require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, other))
				for range n - k {
					events = append(events, mark(t, s))
				}
				var r hipdrv.Readings
				r.Add(s, events, false, false, hipdrv.Event{})
				r.Add(other, []hipdrv.Event{held}, false, false, hipdrv.Event{})
				before := calls(t, "hipEventQuery")
				require.Equal(t, hipdrv.Success, r.Read(0))
				queries := calls(t, "hipEventQuery") - before - 1 // the other stream's one
				reached, _, _, res := r.Answer(0)
				assert.Equal(t, k, reached)
				assert.Equal(t, hipdrv.Success, res)
				reached, _, _, _ = r.Answer(1)
				assert.Equal(t, 1, reached, "the other stream, released before its second hold")
				if k == n {
					assert.Equal(t, uint64(1), queries)
				} else {
					assert.LessOrEqual(t, queries, uint64(1+bits.Len(uint(n-1))))
				}
				hiptest.ReleaseStreams()
				require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
				r.Reset()
				r.Add(s, events, false, false, hipdrv.Event{})
				require.Equal(t, hipdrv.Success, r.Read(0))
				reached, _, _, _ = r.Answer(0)
				assert.Equal(t, n, reached)
				for _, e := range append(events, held) {
					hipdrv.EventDestroy(e)
				}
			})
		}
	}
}

// A reading records on a stream held back the spare it is given, or a new
// event; where the stream is idle it records nothing; where recording is
// not asked, nothing either.
func TestReadingsRecord(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	s := stream(t, 0)
	read := func(events []hipdrv.Event, ask, record bool, spare hipdrv.Event) (int, bool, hipdrv.Event) {
		var r hipdrv.Readings
		r.Add(s, events, ask, record, spare)
		require.Equal(t, hipdrv.Success, r.Read(0))
		n, idle, e, res := r.Answer(0)
		require.Equal(t, hipdrv.Success, res)
		return n, idle, e
	}
	_, idle, e := read(nil, true, true, hipdrv.Event{})
	assert.True(t, idle)
	assert.True(t, e.IsZero())
	defer hiptest.ReleaseStreams()
	require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, s))
	_, idle, e = read(nil, true, false, hipdrv.Event{})
	assert.False(t, idle)
	assert.True(t, e.IsZero(), "no record asked")
	creates := calls(t, "hipEventCreateWithFlags")
	_, _, made := read(nil, true, true, hipdrv.Event{})
	require.False(t, made.IsZero())
	assert.Equal(t, creates+1, calls(t, "hipEventCreateWithFlags"))
	n, _, again := read([]hipdrv.Event{made}, true, true, made)
	assert.Zero(t, n)
	assert.Equal(t, made, again, "the spare recorded")
	assert.Equal(t, creates+1, calls(t, "hipEventCreateWithFlags"), "none made")
	hiptest.ReleaseStreams()
	require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
	n, idle, _ = read([]hipdrv.Event{made}, true, true, hipdrv.Event{})
	assert.Equal(t, 1, n)
	assert.True(t, idle)
	hipdrv.EventDestroy(made)
}

// An event of one's own may be given to FreeAsync on the per-thread
// stream, which records it after the free; where it cannot be recorded,
// FreeAsync waits for the stream and says the free ran.
func TestFreeAsyncEvent(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		name    string
		fail    string
		retired bool
	}{
		{"recorded", "", false},
		{"record fails", "hipEventRecord:1:1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, current, "FAKEHIP_FAIL="+tc.fail) {
				return
			}
			requireFake(t, 1)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			s := hipdrv.StreamPerThread
			a := hipdrv.AllocAsync(0, mib, s)
			require.Equal(t, hipdrv.Call{}, a.Call)
			if !tc.retired {
				require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, s))
			}
			f := hipdrv.FreeAsync(0, a.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Call{}, f.Call)
			assert.Equal(t, tc.retired, f.Retired)
			if tc.retired {
				assert.Equal(t, hipdrv.Success, hiptest.StreamQuery(0, s), "the stream was synchronized: the free ran")
				hipdrv.EventDestroy(f.Event)
				return
			}
			var r hipdrv.Readings
			r.Add(s, []hipdrv.Event{f.Event}, false, false, hipdrv.Event{})
			require.Equal(t, hipdrv.Success, r.Read(0))
			n, _, _, _ := r.Answer(0)
			assert.Zero(t, n, "held back: the free has not run")
			hiptest.ReleaseStreams()
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			// The same event again, for the next free.
			a = hipdrv.AllocAsync(0, mib, s)
			g := hipdrv.FreeAsync(0, a.Ptr, s, f.Event)
			require.Equal(t, hipdrv.Call{}, g.Call)
			assert.Equal(t, f.Event, g.Event)
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			hipdrv.EventDestroy(g.Event)
		})
	}
}

// A stream that takes part in a capture gets no stream-ordered work from
// memtrack: the call says so, with the capture's ID (hipStreamGetCaptureInfo),
// or without it where the runtime lacks that call (hipStreamIsCapturing).
func TestCaptureRefused(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		name string
		env  []string
		ids  bool
	}{
		{"hipStreamGetCaptureInfo", nil, true},
		{"hipStreamIsCapturing", []string{"FAKEHIP_HIDE=hipStreamGetCaptureInfo"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, current, tc.env...) {
				return
			}
			requireFake(t, 1)
			assert.Equal(t, tc.ids, hipdrv.Captures() == nil)
			s1, s2 := stream(t, 0), stream(t, 0)
			a := hipdrv.AllocAsync(0, mib, s1)
			require.Equal(t, hipdrv.Call{}, a.Call)
			require.Equal(t, hipdrv.Success, hiptest.BeginCapture(s1))
			require.Equal(t, hipdrv.Success, hiptest.BeginCapture(s2))
			mallocs, frees := calls(t, "hipMallocAsync"), calls(t, "hipFreeAsync")
			b := hipdrv.AllocAsync(0, mib, s1)
			f := hipdrv.FreeAsync(0, a.Ptr, s1, hipdrv.Event{})
			i2 := hipdrv.StreamInfo(0, s2)
			for _, c := range []hipdrv.StreamCall{b, f, i2} {
				assert.Equal(t, hipdrv.Call{}, c.Call)
				assert.Equal(t, hipdrv.CaptureOngoing, c.Capture.Status)
				assert.Equal(t, tc.ids, c.Capture.ID != 0)
			}
			assert.Zero(t, b.Ptr)
			assert.True(t, f.Event.IsZero())
			assert.Equal(t, b.Capture, f.Capture, "one capture, one ID")
			if tc.ids {
				assert.NotEqual(t, b.Capture.ID, i2.Capture.ID, "two captures, two IDs")
			}
			assert.Equal(t, mallocs, calls(t, "hipMallocAsync"), "nothing allocated")
			assert.Equal(t, frees, calls(t, "hipFreeAsync"), "nothing freed")
			require.Equal(t, hipdrv.Success, hiptest.EndCapture(s1))
			require.Equal(t, hipdrv.Success, hiptest.EndCapture(s2))
			assert.Equal(t, hipdrv.Capture{}, hipdrv.StreamInfo(0, s1).Capture)
			f = hipdrv.FreeAsync(0, a.Ptr, s1, hipdrv.Event{})
			assert.Equal(t, hipdrv.Call{}, f.Call)
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s1))
			hipdrv.EventDestroy(f.Event)
		})
	}
}

// A stream of another device than the one named gets nothing, where the
// runtime can tell (hipStreamGetDevice, ROCm 5.6); a ROCm 5.2 runtime
// cannot, and the call runs on the stream.
func TestOtherDevice(t *testing.T) {
	current, rocm52 := fakeDirs(t)
	for _, tc := range []struct {
		name  string
		dir   string
		tells bool
	}{
		{"ROCm 6.4", current, true},
		{"ROCm 5.2", rocm52, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, tc.dir, "FAKEHIP_DEVICES=2") {
				return
			}
			requireFake(t, 2)
			assert.Equal(t, tc.tells, hipdrv.StreamDevices() == nil)
			s1 := stream(t, 1)
			a := hipdrv.AllocAsync(0, mib, s1)
			assert.Equal(t, hipdrv.Call{}, a.Call)
			assert.Equal(t, tc.tells, a.OtherDevice)
			if tc.tells {
				assert.Equal(t, 1, a.StreamDevice)
				assert.Zero(t, a.Ptr)
				return
			}
			require.NotZero(t, a.Ptr)
			f := hipdrv.FreeAsync(0, a.Ptr, s1, hipdrv.Event{})
			assert.Equal(t, hipdrv.Call{}, f.Call)
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(1, s1))
			hipdrv.EventDestroy(f.Event)
		})
	}
}
