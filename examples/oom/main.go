// Command oom runs out of memory on purpose and keeps the evidence: a
// simulated model loads its weights and a KV cache under a memory limit,
// then a forward pass asks for more than the limit leaves. Each is
// allocated in a category of its own (weights, kv_cache, activations) and
// each phase is a span of the history. The refusal's report is printed,
// with the categories' rows, and package oomdump writes the dump of the
// moment of failure: the report, the stats with the categories' rows, the
// in-use and peak profiles by allocation site and the history as a Chrome
// trace, its phases among it.
//
//	go run ./examples/oom [-device cpu|cuda:N|metal:N] [-o dir]
//	go tool pprof -top dir/oom-*/inuse.pb.gz
//
// It prints the dump's directory last, and exits 0 only where the
// allocation was refused and the dump written.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/oomdump"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("oom: ")
	devName := flag.String("device", "cpu", "device: cpu, cuda:N or metal:N")
	dir := flag.String("o", os.TempDir(), "directory under which the dump is written")
	flag.Parse()
	dev, err := memtrack.ParseDevice(*devName)
	check(err)

	// Record what a post-mortem needs: who allocated (every allocation)
	// and what happened before.
	check(dev.Sites().SetRate(1))
	check(dev.Sites().Enable(32))
	check(dev.History().Enable(4096))
	dumper, err := oomdump.Install(dev, *dir, oomdump.Options{})
	check(err)
	defer dumper.Remove()

	// The instance may hold 96 MiB beside what is already on the device.
	check(dev.SetMemoryLimit(dev.MemoryAllocated() + 96<<20))
	defer dev.SetMemoryLimit(0)

	load := span(dev, "load weights")
	weights := loadWeights(category(dev, memtrack.CategoryWeights), 4, 16<<20)
	check(load.End())
	cacheSpan := span(dev, "cache")
	cache := allocKVCache(category(dev, memtrack.CategoryKVCache), 24<<20)
	check(cacheSpan.End())
	pass := span(dev, "forward pass") // still open when the dump is written
	err = forwardPass(category(dev, memtrack.CategoryActivations), 8, 4<<20)
	check(pass.End())

	var oom *memtrack.OutOfMemoryError
	if !errors.As(err, &oom) {
		log.Fatalf("the forward pass did not run out of memory: %v", err)
	}
	fmt.Printf("error: %v\n\n", err)
	fmt.Printf("%+v\n\n", oom)
	dumps := dumper.Dumps()
	if len(dumps) != 1 || dumper.Unwritten() > 0 {
		log.Fatalf("want one dump written, have %q (%d failed)", dumps, dumper.Unwritten())
	}
	entries, err := os.ReadDir(dumps[0])
	check(err)
	fmt.Println("dump:")
	for _, e := range entries {
		fmt.Printf("  %s\n", e.Name())
	}
	for _, b := range append(weights, cache) {
		check(b.Free())
	}
	fmt.Println(dumps[0])
}

//go:noinline
func loadWeights(dev memtrack.Category, n int, size int64) []*memtrack.Buffer {
	var bs []*memtrack.Buffer
	for range n {
		b, err := dev.Alloc(size)
		check(err)
		load(b)
		bs = append(bs, b)
	}
	return bs
}

// load writes a buffer that the host can address, one byte a page, as
// loading or computing would: on the CPU, memory is in use once it is
// touched.
func load(b *memtrack.Buffer) {
	mem := b.Bytes()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
}

//go:noinline
func allocKVCache(dev memtrack.Category, size int64) *memtrack.Buffer {
	b, err := dev.Alloc(size)
	check(err)
	load(b)
	return b
}

// forwardPass allocates an activation per layer, each held until the pass
// ends, and returns the first error.
//
//go:noinline
func forwardPass(dev memtrack.Category, layers int, size int64) error {
	var acts []*memtrack.Buffer
	defer func() {
		for _, b := range acts {
			check(b.Free())
		}
	}()
	for i := range layers {
		b, err := activation(dev, size)
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		load(b)
		acts = append(acts, b)
	}
	return nil
}

//go:noinline
func activation(dev memtrack.Category, size int64) (*memtrack.Buffer, error) {
	return dev.Alloc(size)
}

// category returns the device's category called name.
func category(dev memtrack.Device, name string) memtrack.Category {
	c, err := dev.Category(name)
	check(err)
	return c
}

// span begins a span of the device's history called name.
func span(dev memtrack.Device, name string) *memtrack.Span {
	sp, err := dev.History().BeginSpan(name)
	check(err)
	return sp
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
