// Command mumax3pool allocates through mumax3's buffer pool and prints what
// memtrack counted at each step. scripts/try-mumax3.sh copies it into a copy
// of mumax3 whose allocating files import github.com/memtrack/memtrack/cu,
// and runs it on the fake driver of testdata/fakecuda; it exits 1 where a
// figure is not the one the pool's calls imply.
//
// It makes the context as cuda.Init does (cu.Init, a context on device 0,
// made current on a locked thread) but leaves out cuda.Init's check of the
// compute capability and its loading of a kernel module, which the fake
// driver does not offer: the pool launches no kernel.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/cu"
	"github.com/mumax/3/cuda"
)

func main() {
	runtime.LockOSThread()
	cu.Init(0)
	cu.CtxCreate(cu.CTX_SCHED_YIELD, cu.Device(0)).SetCurrent()
	dev, err := memtrack.CUDA(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mumax3pool:", err)
		os.Exit(1)
	}
	size := [3]int{64, 64, 1}
	const nComp = 3
	const bytes = nComp * 64 * 64 * 4 // float32 components

	base := dev.MemoryStats()
	failed := false
	check := func(step string, tracked, buffers, allocs, frees int64) {
		s := dev.MemoryStats()
		got := [4]int64{s.Tracked - base.Tracked, s.Buffers - base.Buffers, s.Allocs - base.Allocs, s.Frees - base.Frees}
		want := [4]int64{tracked, buffers, allocs, frees}
		mark := "ok"
		if got != want {
			mark, failed = fmt.Sprintf("WRONG, want %v", want), true
		}
		fmt.Printf("%-28s tracked %6d B, %d buffers, %d allocs, %d frees: %s\n", step, got[0], got[1], got[2], got[3], mark)
	}

	b := cuda.Buffer(nComp, size)
	check("Buffer(3, 64x64x1)", bytes, nComp, nComp, 0)
	cuda.Recycle(b)
	check("Recycle: the pool keeps it", bytes, nComp, nComp, 0)
	b = cuda.Buffer(nComp, size)
	check("Buffer again, from the pool", bytes, nComp, nComp, 0)
	cuda.Recycle(b)
	cuda.FreeBuffers()
	check("FreeBuffers", 0, 0, nComp, nComp)
	if failed {
		os.Exit(1)
	}
}
