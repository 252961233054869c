package memtrack_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"unsafe"

	"github.com/memtrack/memtrack"
)

// Profile the peak of a piece of work on a device: reset the peak, run, read.
func Example() {
	dev := memtrack.CPU()
	base := dev.MemoryAllocated()
	dev.ResetPeakMemoryStats()

	weights, _ := dev.Alloc(8 << 20)
	activations, _ := dev.Alloc(2 << 20)
	_ = activations.Free()
	scratch, _ := dev.Alloc(1 << 20)
	_ = scratch.Free()

	fmt.Println("held:", dev.MemoryAllocated()-base)
	fmt.Println("peak:", dev.MaxMemoryAllocated()-base)
	_ = weights.Free()
	// Output:
	// held: 8388608
	// peak: 10485760
}

func ExampleParseDevice() {
	d, err := memtrack.ParseDevice("cpu")
	fmt.Println(d, d.Kind(), d.Ordinal(), err)
	_, err = memtrack.ParseDevice("tpu:0")
	fmt.Println(errors.Is(err, memtrack.ErrInvalidDevice))
	// Output:
	// cpu cpu 0 <nil>
	// true
}

func ExampleDevice_SetMemoryLimit() {
	dev := memtrack.CPU()
	_ = dev.SetMemoryLimit(dev.MemoryAllocated() + 1<<20)
	defer dev.SetMemoryLimit(0)

	_, err := dev.Alloc(2 << 20)
	var oom *memtrack.OutOfMemoryError
	fmt.Println(errors.Is(err, memtrack.ErrOutOfMemory), errors.As(err, &oom), oom.Reason)
	// Output:
	// true true memory limit
}

func ExampleDevice_MemoryStats() {
	dev := memtrack.CPU()
	dev.ResetAccumulatedMemoryStats()
	a, _ := dev.Alloc(4096)
	b, _ := dev.Alloc(1024)
	_ = a.Free()
	s := dev.MemoryStats()
	fmt.Println(s.Allocs, s.Frees, s.AllocBytes, s.FreedBytes)
	_ = b.Free()
	// Output:
	// 2 1 5120 4096
}

func ExampleBuffer_Free() {
	b, _ := memtrack.CPU().Alloc(64)
	fmt.Println(b.Free())
	fmt.Println(errors.Is(b.Free(), memtrack.ErrDoubleFree))
	// Output:
	// <nil>
	// true
}

func ExampleDevice_Measure() {
	dev := memtrack.CPU() // or a GPU: memtrack.ParseDevice("cuda:0")
	weights, err := dev.Alloc(64 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer weights.Free()

	// One dummy forward pass: activations come and go.
	p, err := dev.Measure(func() error {
		hidden, err := dev.Alloc(16 << 20)
		if err != nil {
			return err
		}
		scores, err := dev.Alloc(32 << 20)
		if err != nil {
			return err
		}
		if err := scores.Free(); err != nil {
			return err
		}
		return hidden.Free()
	})
	if err != nil {
		log.Fatal(err)
	}
	// The tracked figures are exact; p.UsedIncrease and p.Untracked come
	// from the OS or driver and vary from run to run.
	fmt.Println("peak above the weights:", p.PeakTrackedIncrease>>20, "MiB")
	fmt.Println("held after the pass:", (p.EndTracked-p.StartTracked)>>20, "MiB")
	// Output:
	// peak above the weights: 48 MiB
	// held after the pass: 0 MiB
}

func ExampleMeasurement_Budget() {
	// The figures an 80 GiB GPU might give: the baseline before the
	// instance loaded its weights, which holds its 1 GiB context
	// (Device.Baseline retains it, and Budget, as vLLM, leaves it outside
	// the request), then the measurement of one forward pass.
	const gib = 1 << 30
	base := memtrack.Usage{Total: 80 * gib, Free: 79 * gib, Used: 1 * gib, Untracked: 1 * gib}
	p := memtrack.Measurement{
		Total:               80 * gib,
		StartTracked:        16 * gib, // the weights
		StartUsed:           17 * gib, // the weights and a 1 GiB context
		PeakTrackedIncrease: 6 * gib,  // the forward pass's activations
		PeakTracked:         22 * gib,
		EndTracked:          16 * gib, // the activations are freed
		EndUsed:             18 * gib, // libraries kept 1 GiB of workspaces
		UsedIncrease:        1 * gib,
		Untracked:           1 * gib,
	}
	b, err := p.Budget(base, 0.9, 16<<20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d GiB requested - (%d GiB weights + %d GiB peak + %d GiB untracked) = %d GiB: %d blocks of %d MiB\n",
		b.Requested/gib, b.Weights/gib, b.PeakIncrease/gib, b.UntrackedIncrease/gib, b.Available/gib, b.Blocks, b.BlockSize>>20)

	_, err = p.Budget(base, 90, 16<<20)
	fmt.Println(err)
	// Output:
	// 72 GiB requested - (16 GiB weights + 6 GiB peak + 1 GiB untracked) = 49 GiB: 3136 blocks of 16 MiB
	// memtrack: invalid argument: 90: want a fraction of the device's memory in (0, 1]
}

// Reserved is the driver's figure for a buffer beside the size that is
// tracked. A Metal buffer reserves whole pages; the CPU backend reserves
// exactly the size asked for.
func ExampleBuffer_RoundedSize() {
	buf, err := memtrack.CPU().Alloc(1000)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Free()
	fmt.Println(buf.Size(), buf.RoundedSize())
	// Output: 1000 1000
}

// The CPU is named by its model (which differs between machines, and so is
// not printed here) and has no UUID; a GPU's UUID is its name in nvidia-smi
// and dcgm-exporter.
func ExampleDevice_Info() {
	info, err := memtrack.CPU().Info()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%v uuid=%q\n", info.Device, info.UUID)
	// Output: cpu uuid=""
}

func ExampleStats_String() {
	s := memtrack.Stats{Device: memtrack.CPU(), Tracked: 3 << 29, PeakTracked: 2 << 30, Held: 3 << 29, PeakHeld: 2 << 30, Buffers: 3, PeakBuffers: 4, AllocBytes: 5 << 30, FreedBytes: 3584 << 20, Allocs: 10, Frees: 7}
	fmt.Println(s)
	// Output:
	// cpu: tracked 1.50 GiB (1610612736 B), peak tracked 2.00 GiB (2147483648 B); 3 buffers (peak 4); 5.00 GiB (5368709120 B) in 10 allocs, 3.50 GiB (3758096384 B) freed in 7 frees; 0 failed allocs; no limit
}

func ExampleStats_LogValue() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	s := memtrack.Stats{Device: memtrack.CPU(), Tracked: 3 << 20, PeakTracked: 4 << 20, Held: 3 << 20, PeakHeld: 4 << 20, Buffers: 2, PeakBuffers: 3, AllocBytes: 5 << 20, FreedBytes: 2 << 20, Allocs: 4, Frees: 2}
	logger.Info("memory", "stats", s) // with a real device: dev.MemoryStats()
	// Output:
	// level=INFO msg=memory stats.device=cpu stats.tracked=3145728 stats.peak_tracked=4194304 stats.held=3145728 stats.peak_held=4194304 stats.alloc_bytes=5242880 stats.freed_bytes=2097152 stats.buffers=2 stats.peak_buffers=3 stats.allocs=4 stats.frees=2 stats.failed_allocs=0 stats.leaks=0 stats.leaked_bytes=0 stats.limit=0
}

func ExampleExpvar() {
	v := memtrack.Expvar()
	// Publish it once, in main, to serve it at /debug/vars:
	//	expvar.Publish("memtrack", v)

	buf, err := memtrack.CPU().Alloc(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()

	var stats map[string]memtrack.Stats // what a reader of /debug/vars gets
	if err := json.Unmarshal([]byte(v.String()), &stats); err != nil {
		log.Fatal(err)
	}
	fmt.Println(stats["cpu"].Tracked, stats["cpu"].Buffers)
	// Output:
	// 1048576 1
}

//go:noinline
func loadWeights(d memtrack.Device) *memtrack.Buffer {
	b, err := d.Alloc(3 << 20)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

//go:noinline
func scratch(d memtrack.Device) {
	b, err := d.Alloc(5 << 20)
	if err != nil {
		log.Fatal(err)
	}
	b.Free()
}

// Record the device's history, as torch.cuda.memory._record_memory_history
// does, then read every allocation, free and refusal back, each with the
// figure after it. Package github.com/memtrack/memtrack/trace writes the
// history for Perfetto UI, and github.com/memtrack/memtrack/web plots it.
func ExampleHistoryRecorder_Snapshot() {
	d := memtrack.CPU()
	if err := d.History().Enable(1000); err != nil { // the newest 1000 events
		log.Fatal(err)
	}
	defer d.History().Disable()
	base := d.MemoryAllocated()

	a, _ := d.Alloc(4 << 20)
	b, _ := d.Alloc(1 << 20)
	a.Free()
	d.SetMemoryLimit(base + 2<<20)
	if _, err := d.Alloc(2 << 20); err != nil {
		fmt.Println("refused:", errors.Is(err, memtrack.ErrOutOfMemory))
	}
	d.SetMemoryLimit(0)
	b.Free()

	h, err := d.History().Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range h.Events {
		fmt.Printf("%d %-5v %d MiB, then %d MiB\n", e.Seq, e.Action, e.Size>>20, (e.Tracked-base)>>20)
	}
	// Output:
	// refused: true
	// 0 alloc 4 MiB, then 4 MiB
	// 1 alloc 1 MiB, then 5 MiB
	// 2 free  4 MiB, then 1 MiB
	// 3 limit 2 MiB, then 1 MiB
	// 4 free  1 MiB, then 0 MiB
}

// Count memory that another binding allocated: here a C library's
// workspace, stood for by a Go slice. The handle uncounts it; the library
// frees it.
func ExampleDevice_Track() {
	dev := memtrack.CPU()
	base := dev.MemoryAllocated()

	workspace := make([]byte, 4<<20) // allocated by "the library"
	ptr := uintptr(unsafe.Pointer(&workspace[0]))
	h, err := dev.Track(int64(len(workspace)), ptr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tracked:", dev.MemoryAllocated()-base, memtrack.KindCPU.TrackedAt(ptr) == h)

	_, err = dev.Track(16, ptr)
	fmt.Println(errors.Is(err, memtrack.ErrAlreadyTracked))

	_ = h.Release() // uncounts; frees nothing
	fmt.Println("tracked:", dev.MemoryAllocated()-base, len(workspace))
	// Output:
	// tracked: 4194304 true
	// true
	// tracked: 0 4194304
}
