// Command profile shows memtrack's main use end to end: it profiles the peak
// memory of a dummy forward pass of a model on one device, then sizes a
// KV cache from what remains, as an inference server does before it starts.
//
//	go run ./examples/profile [-device cpu|cuda:N|metal:N] [-utilization 0.9] [-block-size 16MiB]
//	go run ./examples/profile -serve localhost:6060 -linger 1m -trace memtrack.json
//
// The forward pass is simulated: the weights are allocated once, then several
// goroutines (the requests of a batch) each allocate and free the
// activations of every layer, the way a framework's allocator is driven.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/memtrack/memtrack"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("profile: ")
	var (
		devName     = flag.String("device", "cpu", "device to profile: cpu, cuda:N or metal:N")
		utilization = flag.Float64("utilization", 0.9, "fraction of the device's memory the server may use, in (0, 1]")
		blockSize   = flag.String("block-size", "16MiB", "size of one KV-cache block (bytes, or with a KiB, MiB or GiB suffix)")
		workers     = flag.Int("workers", 4, "requests processed at once in the forward pass")
		layers      = flag.Int("layers", 12, "layers of the model")
		hidden      = flag.String("activation", "4MiB", "activation size of one request in one layer")
		weights     = flag.String("weights", "64MiB", "size of the model's weights")
		serve       = flag.String("serve", "", "serve the page (a timeline of the memory) at http://ADDR/debug/memtrack/ while it runs, e.g. localhost:6060")
		traceFile   = flag.String("trace", "", "write the allocation history to this file as a Chrome trace, for Perfetto UI")
		linger      = flag.Duration("linger", 0, "with -serve, keep serving this long once done")
	)
	flag.Parse()
	block, err := parseSize(*blockSize)
	check(err)
	act, err := parseSize(*hidden)
	check(err)
	w, err := parseSize(*weights)
	check(err)
	if *utilization <= 0 || *utilization > 1 {
		log.Fatalf("-utilization %v: want a fraction in (0, 1]", *utilization)
	}
	if *workers < 1 || *layers < 1 {
		log.Fatalf("-workers and -layers must be at least 1")
	}
	dev, err := memtrack.ParseDevice(*devName)
	check(err)
	stopView := startView(dev, *serve, *traceFile, *linger) // view.go
	defer stopView()

	// The weights stay allocated for the server's lifetime.
	weightBuf, err := dev.Alloc(w)
	check(err)
	defer weightBuf.Free()

	// Measure one forward pass: the peak measures only what it adds.
	p, err := dev.Measure(func() error { return forwardPass(dev, *workers, *layers, act) })
	check(err)
	b, err := p.Budget(*utilization, block)
	check(err)

	fmt.Print(dev.MemorySummary())
	fmt.Printf("\nforward pass: %d requests x %d layers, activations of %s\n", *workers, *layers, size(act))
	fmt.Printf("peak memory:  %s (%d bytes; %s above the weights)\n", size(p.PeakTracked), p.PeakTracked, size(p.TrackedPeakIncrease))
	fmt.Printf("device:       %s total, %s in use before the pass and %s after (reported), %s of the growth untracked\n",
		size(p.Total), size(p.BaselineUsed), size(p.EndUsed), size(p.Untracked))
	fmt.Printf("KV cache:     %s x %.2f = %s budget, minus the %s in use at the peak = %s\n", size(p.Total), b.Utilization, size(b.Usable), size(b.Reserved), size(b.Available))
	if b.Blocks == 0 {
		fmt.Printf("KV cache:     no room for one %s block\n", size(block))
		os.Exit(1)
	}
	fmt.Printf("KV cache:     %d blocks of %s\n", b.Blocks, size(block))
}

// forwardPass runs workers requests through layers layers at once. Each layer
// allocates its output, and frees its input once the output exists; the
// residual stream stays live for the whole pass, as in a transformer.
func forwardPass(dev memtrack.Device, workers, layers int, act int64) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := request(dev, layers, act); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func request(dev memtrack.Device, layers int, act int64) error {
	residual, err := dev.Alloc(act)
	if err != nil {
		return err
	}
	defer residual.Free()
	in, err := dev.Alloc(act)
	if err != nil {
		return err
	}
	for range layers {
		// Attention scores and the MLP's wider hidden state, then the output.
		scratch, err := dev.Alloc(4 * act)
		if err != nil {
			in.Free()
			return err
		}
		touch(scratch)
		out, err := dev.Alloc(act)
		if err != nil {
			scratch.Free()
			in.Free()
			return err
		}
		touch(out)
		if err := scratch.Free(); err != nil {
			return err
		}
		if err := in.Free(); err != nil {
			return err
		}
		in = out
	}
	return in.Free()
}

// touch writes one byte per page of host-visible memory, as a kernel would.
func touch(b *memtrack.Buffer) {
	p := b.Bytes()
	for i := 0; i < len(p); i += 4096 {
		p[i] = 1
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.TrimSpace(s)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, optionally with KiB, MiB or GiB", s)
	}
	return n * mult, nil
}

func size(n int64) string {
	if n < 0 { // the untracked growth, where others freed memory meanwhile
		return "-" + size(-n)
	}
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
