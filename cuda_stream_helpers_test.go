//go:build cuda

package memtrack

import (
	"fmt"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/require"
)

// Helpers of the stream-ordered tests and benchmarks.

// sideOf returns the device-side figure of CUDA device ordinal, or nil
// where the CUDA table's backend is not the driver's (a test's fake) or has
// no such device.
func sideOf(ordinal int) *deviceSide {
	b, ok := openTable(KindCUDA).b.(*cudaBackend)
	if !ok {
		return nil
	}
	return b.side(ordinal)
}

// cudaDeviceOf returns the CUDA backend's state of device ordinal and its
// primary context, as the backend's own operations get them.
func cudaDeviceOf(ordinal int, op string) (*cudaDevice, cuContext, error) {
	b, ok := openTable(KindCUDA).b.(*cudaBackend)
	if !ok {
		return nil, 0, fmt.Errorf("%w: the CUDA table's backend is a test's, not the driver's", ErrBackendUnavailable)
	}
	return b.device(ordinal, op)
}

// streamWait orders the work enqueued on waiter from now on after the work
// enqueued on after so far, on CUDA device d. A buffer allocated on one
// stream and freed on another needs it (or a synchronization) between the
// two: the stream-ordered allocator requires every access of an
// allocation, its free included, to come after the allocation in stream
// order. The tests and benchmarks use it.
func streamWait(d Device, waiter, after Stream) error {
	_, ctx, err := cudaDeviceOf(d.ordinal, "stream wait")
	if err != nil {
		return err
	}
	if err := cudatest.Load(); err != nil {
		return err
	}
	var r cudadrv.Result
	if r2 := cudatest.InContext(uintptr(ctx), func() { r = cudatest.StreamWait(uintptr(waiter), uintptr(after)) }); r2 != cudadrv.Success {
		r = r2
	}
	if r != cudadrv.Success {
		return resultError("stream wait", "", r)
	}
	return nil
}

// rawAllocFreeAsync is the floor BenchmarkCUDAAllocFreeAsync compares with:
// cuMemAllocAsync and cuMemFreeAsync in one cgo call each, in ctx, which it
// makes current and restores as the tracked calls do. With marker (an
// event of ctx, cudatest.EventCreate), the free is followed by an event
// recorded on it, reused as FreeAsync reuses its events: the raw pair plus
// the one stream operation that learning exactly when a free executes
// takes.
func rawAllocFreeAsync(ctx cuContext, size int64, stream Stream, marker uintptr) error {
	p, r := cudatest.AllocAsync(uintptr(ctx), size, uintptr(stream))
	if r != cudadrv.Success {
		return resultError("alloc", "", r)
	}
	if r := cudatest.FreeAsync(uintptr(ctx), p, uintptr(stream), marker); r != cudadrv.Success {
		return resultError("free", "", r)
	}
	return nil
}

// driverCalls returns a function that gives, for each of names (the driver's
// entry points by base name), the calls the process has made to it since
// driverCalls was called, as the fake driver counts them; the test skips
// where the driver counts none (a real one).
func driverCalls(tb testing.TB, names ...string) func() map[string]uint64 {
	tb.Helper()
	calls, counted := countCalls(tb, names...)
	if !counted {
		tb.Skip("the driver counts no calls: needs the fake driver of testdata/fakecuda")
	}
	return calls
}

// countCalls is driverCalls for a test that also runs where the driver
// counts no calls: there, counted is false and calls is nil.
func countCalls(tb testing.TB, names ...string) (calls func() map[string]uint64, counted bool) {
	tb.Helper()
	require.NoError(tb, cudatest.Load())
	if _, ok := cudatest.DriverCalls("cuInit"); !ok {
		return nil, false
	}
	snapshot := func() map[string]uint64 {
		m := make(map[string]uint64, len(names))
		for _, n := range names {
			m[n], _ = cudatest.DriverCalls(n)
		}
		return m
	}
	before := snapshot()
	return func() map[string]uint64 {
		made := snapshot()
		for n := range made {
			made[n] -= before[n]
		}
		return made
	}, true
}

// readingQueries reads the figures of device d and returns the events the
// reading asked the driver about (cuEventQuery): none exactly where no free
// of FreeAsync waits for its event (a reading asks nothing then, and asks
// each stream with frees pending at least once), so that a test sees, from
// outside, whether frees are pending. counted is false where the driver
// counts no calls (a real one): the reading is made, and says nothing.
func readingQueries(tb testing.TB, d Device) (queries uint64, counted bool) {
	tb.Helper()
	calls, counted := countCalls(tb, "cuEventQuery")
	d.MemoryStats()
	if !counted {
		return 0, false
	}
	return calls()["cuEventQuery"], true
}

// quietSide readies device d for a count of the calls that learn of frees:
// its device-side peak well above what the test holds, so that no
// allocation raises it (which would read the events first), and no free
// pending (checked where the driver counts its calls).
func quietSide(t *testing.T, d Device) {
	t.Helper()
	require.NotNil(t, sideOf(d.Ordinal()))
	big, err := d.Alloc(64 << 20)
	require.NoError(t, err)
	require.NoError(t, big.Free())
	d.MemoryStats() // reads every event reached
	if q, counted := readingQueries(t, d); counted {
		require.Zero(t, q, "a free of an earlier test is still pending")
	}
}
