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
// free records an event after it, numbered along its stream (the
// per-thread stream's are not), which the stream reaches once it runs the
// free.
func TestAllocFreeAsync(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	for _, tc := range []struct {
		name     string
		stream   uintptr
		numbered bool
	}{
		{"null stream", 0, true},
		{"per-thread stream", hipdrv.StreamPerThread, false},
		{"stream of one's own", stream(t, 0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The per-thread stream is the thread's own, and a subtest
			// runs in a goroutine of its own: it holds its thread.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var seqs []uint64
			var events hipdrv.StreamEvents
			for range 3 {
				a := hipdrv.AllocAsync(0, mib, tc.stream)
				require.Equal(t, hipdrv.Call{}, a.Call)
				require.NotZero(t, a.Ptr)
				assert.Equal(t, hipdrv.Capture{}, a.Capture)
				f := hipdrv.FreeAsync(0, a.Ptr, tc.stream, hipdrv.Event{})
				require.Equal(t, hipdrv.Call{}, f.Call)
				require.False(t, f.Event.IsZero())
				assert.False(t, f.Retired)
				seqs = append(seqs, f.Seq)
				events.Add(f.Event)
			}
			events.EndStream()
			if tc.numbered {
				assert.Less(t, seqs[0], seqs[1])
				assert.Less(t, seqs[1], seqs[2])
			} else {
				assert.Equal(t, []uint64{0, 0, 0}, seqs)
			}
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, tc.stream))
			events.Query(0)
			n, r := events.Reached(0)
			assert.Equal(t, 3, n)
			assert.Equal(t, hipdrv.Success, r)
		})
	}
}

// How far a stream has come through its events, asked of streams held back
// at every place: the newest event first, then bisection, so that n events
// cost at most 1 + ceil(log2 n) queries, and exactly one where all are
// reached.
func TestStreamEventsReached(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	for n := 1; n <= 6; n++ {
		for k := 0; k <= n; k++ {
			t.Run(fmt.Sprintf("%d of %d", k, n), func(t *testing.T) {
				s := stream(t, 0)
				var events hipdrv.StreamEvents
				var marker uintptr
				for i := range n {
					if i == k {
						var r hipdrv.Result
						marker, r = hiptest.RecordEvent(0, s)
						require.Equal(t, hipdrv.Success, r)
						require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, s))
					}
					a := hipdrv.AllocAsync(0, mib, s)
					require.Equal(t, hipdrv.Call{}, a.Call)
					f := hipdrv.FreeAsync(0, a.Ptr, s, hipdrv.Event{})
					require.Equal(t, hipdrv.Call{}, f.Call)
					events.Add(f.Event)
				}
				events.EndStream()
				if k == n {
					var r hipdrv.Result
					marker, r = hiptest.RecordEvent(0, s)
					require.Equal(t, hipdrv.Success, r)
				}
				require.Equal(t, hipdrv.Success, hiptest.EventSynchronize(marker)) // the first k frees ran
				defer hiptest.EventDestroy(marker)
				before := calls(t, "hipEventQuery")
				events.Query(0)
				queries := calls(t, "hipEventQuery") - before
				reached, r := events.Reached(0)
				assert.Equal(t, k, reached)
				assert.Equal(t, hipdrv.Success, r)
				if k == n {
					assert.Equal(t, uint64(1), queries)
				} else {
					assert.LessOrEqual(t, queries, uint64(1+bits.Len(uint(n-1))))
				}
				hiptest.ReleaseStreams()
				require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
				events.Query(0)
				reached, _ = events.Reached(0)
				assert.Equal(t, n, reached)
			})
		}
	}
}

// StreamEvents groups events by stream: each stream is answered apart, in
// one call for all.
func TestStreamEventsStreams(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	held, free := stream(t, 0), stream(t, 0)
	require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, held))
	defer hiptest.ReleaseStreams()
	var events hipdrv.StreamEvents
	for _, s := range []uintptr{held, free} {
		for range 2 {
			a := hipdrv.AllocAsync(0, mib, s)
			require.Equal(t, hipdrv.Call{}, a.Call)
			f := hipdrv.FreeAsync(0, a.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Call{}, f.Call)
			events.Add(f.Event)
		}
		events.EndStream()
	}
	require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, free))
	require.Equal(t, 2, events.Streams())
	assert.Equal(t, 2, events.Len(0))
	assert.Equal(t, 2, events.Len(1))
	events.Query(0)
	n, _ := events.Reached(0)
	assert.Equal(t, 0, n, "the held stream")
	n, _ = events.Reached(1)
	assert.Equal(t, 2, n, "the other")
	events.Reset()
	assert.Zero(t, events.Streams())
}

// An event of one's own may be given to FreeAsync, which records it after
// the free; where it cannot be recorded, FreeAsync waits for the stream and
// says the free ran.
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
			s := stream(t, 0)
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
				// The event made for it was never recorded: hipEventQuery
				// "returns hipSuccess, if hipEventRecord() is not called
				// before", so it counts as reached.
				require.False(t, f.Event.IsZero())
				var events hipdrv.StreamEvents
				events.Add(f.Event)
				events.EndStream()
				events.Query(0)
				n, r := events.Reached(0)
				assert.Equal(t, [2]any{1, hipdrv.Success}, [2]any{n, r})
				hipdrv.EventDestroy(f.Event)
				return
			}
			var events hipdrv.StreamEvents
			events.Add(f.Event)
			events.EndStream()
			events.Query(0)
			n, _ := events.Reached(0)
			assert.Zero(t, n, "held back: the free has not run")
			hiptest.ReleaseStreams()
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			// The same event again, for the next free.
			a = hipdrv.AllocAsync(0, mib, s)
			g := hipdrv.FreeAsync(0, a.Ptr, s, f.Event)
			require.Equal(t, hipdrv.Call{}, g.Call)
			assert.Equal(t, f.Event, g.Event)
			assert.Greater(t, g.Seq, f.Seq)
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
