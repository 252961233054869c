//go:build cuda

package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/mumax/3/cuda/cu"
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
		return nil, cuContext{}, fmt.Errorf("%w: the CUDA table's backend is a test's, not the driver's", ErrBackendUnavailable)
	}
	return b.device(ordinal, op)
}

// streamWait orders the work enqueued on waiter from now on after the work
// enqueued on after so far, on CUDA device d, in one cgo call. A buffer
// allocated on one stream and freed on another needs it (or a
// synchronization) between the two: the stream-ordered allocator requires
// every access of an allocation, its free included, to come after the
// allocation in stream order. The tests and benchmarks use it.
func streamWait(d Device, waiter, after Stream) error {
	dev, ctx, err := cudaDeviceOf(d.ordinal, "stream wait")
	if err != nil {
		return err
	}
	return dev.settle("stream wait", resultOf(cudadrv.StreamWait(ctx, uintptr(waiter), uintptr(after))))
}

// rawAllocFreeAsync is the floor BenchmarkCUDAAllocFreeAsync compares with:
// cuMemAllocAsync and cuMemFreeAsync in one cgo call each, in ctx, which it
// makes current and restores as the tracked calls do.
// With marker, the free is followed by an event recorded on *marker (created
// at the first call, then reused, as FreeAsync reuses its events): the raw
// pair plus the one stream operation that learning exactly when a free
// executes takes.
func rawAllocFreeAsync(ctx cuContext, size int64, stream Stream, marker *cudadrv.Event) error {
	a := cudadrv.AllocAsync(ctx, size, uintptr(stream))
	if r := resultOf(a.Call); r.enter != cu.SUCCESS || r.op != cu.SUCCESS {
		return resultError("alloc", "", max(r.enter, r.op))
	}
	how, event := cudadrv.Untracked, cudadrv.Event{}
	if marker != nil {
		how, event = cudadrv.ByEvent, *marker
	}
	f := cudadrv.FreeAsync(ctx, a.Ptr, uintptr(stream), how, event)
	if r := resultOf(f.Call); r.enter != cu.SUCCESS || r.op != cu.SUCCESS {
		return resultError("free", "", max(r.enter, r.op))
	}
	if marker != nil {
		*marker = f.Event
	}
	return nil
}
