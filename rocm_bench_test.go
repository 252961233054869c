//go:build rocm

package memtrack

import (
	"runtime"
	"testing"

	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
)

// BenchmarkROCmAllocFree compares, in one run, a tracked allocation and
// free (Device.Alloc and Buffer.Free: the Device layer, the counters and
// one cgo call of ours each, which makes the device current, runs in
// relaxed capture mode and puts the thread's device back) with the raw
// pair of runtime calls (hipMalloc and hipFree, one cgo call for both) on
// a thread whose device is already current. Compare them as ratios, per
// size:
//
//	go test -tags rocm -run '^$' -bench ROCmAllocFree -count 10 | benchstat -col /pair -
func BenchmarkROCmAllocFree(b *testing.B) {
	d, err := ROCm(0)
	if err != nil {
		b.Skip(err)
	}
	if err := hiptest.Load(); err != nil {
		b.Fatal(err)
	}
	for _, size := range []struct {
		name string
		n    int64
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		b.Run("size="+size.name+"/pair=tracked", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.Alloc(size.n)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("size="+size.name+"/pair=raw", func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if r := hiptest.SetDevice(d.Ordinal()); r != hipdrv.Success {
				b.Fatal(r)
			}
			b.ReportAllocs()
			for b.Loop() {
				if r := hiptest.MallocFree(size.n); r != hipdrv.Success {
					b.Fatal(r)
				}
			}
		})
	}
}

// BenchmarkROCmAllocFreeAsync compares, in one run, a tracked
// stream-ordered allocation and free (Device.AllocAsync and
// Buffer.FreeAsync, with the event recorded after each free and the
// readings that query them) with the raw pair of runtime calls
// (hipMallocAsync and hipFreeAsync, one cgo call for both, on a thread
// whose device is current), on a stream of its own. Every 256 iterations
// the stream is synchronized, so that the work enqueued stays bounded; the
// pool keeps what it reserved (its release threshold raised), so that no
// pair pays for returning memory to the device and taking it back.
//
//	go test -tags rocm -run '^$' -bench ROCmAllocFreeAsync -count 10 | benchstat -col /pair -
func BenchmarkROCmAllocFreeAsync(b *testing.B) {
	d, err := ROCm(0)
	if err != nil {
		b.Skip(err)
	}
	if err := hiptest.Load(); err != nil {
		b.Fatal(err)
	}
	if err := d.Pool().SetReleaseThreshold(1 << 40); err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { d.Pool().SetReleaseThreshold(0) })
	s, r := hiptest.StreamCreate(d.Ordinal())
	if r != hipdrv.Success {
		b.Fatal(r)
	}
	b.Cleanup(func() { hiptest.StreamDestroy(s) })
	sync := func(b *testing.B) {
		if r := hiptest.StreamSynchronize(d.Ordinal(), s); r != hipdrv.Success {
			b.Fatal(r)
		}
	}
	for _, size := range []struct {
		name string
		n    int64
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		b.Run("size="+size.name+"/pair=tracked", func(b *testing.B) {
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.AllocAsync(size.n, Stream(s))
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.FreeAsync(Stream(s)); err != nil {
					b.Fatal(err)
				}
				if i++; i%256 == 0 {
					sync(b)
					d.MemoryStats() // reads the pending events, as any reader does
				}
			}
			sync(b)
			d.MemoryStats()
		})
		b.Run("size="+size.name+"/pair=raw", func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if r := hiptest.SetDevice(d.Ordinal()); r != hipdrv.Success {
				b.Fatal(r)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if r := hiptest.MallocFreeAsync(size.n, s); r != hipdrv.Success {
					b.Fatal(r)
				}
				if i++; i%256 == 0 {
					sync(b)
				}
			}
			sync(b)
		})
	}
}
