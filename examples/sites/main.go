// Command sites writes device-memory profiles by allocation site for
// go tool pprof: who holds the memory once a dummy forward pass is done, and
// who held it at the pass's peak.
//
//	go run ./examples/sites [-device cpu|cuda:N|metal:N] [-o dir] [-rate bytes]
//	go tool pprof -top dir/inuse.pb.gz
//	go tool pprof -top dir/peak.pb.gz
//
// Allocations are sampled as Go's heap profiler samples them, on average one
// per -rate bytes (memtrack.DefaultSiteRate, 512 KiB, unless set; 1 records
// every allocation), and the profiles' figures are scaled to match; buffers
// of many MiB, as here, are practically always recorded.
//
// The model is simulated: the weights and a KV cache stay allocated, and
// every layer of the pass allocates an activation and an attention scratch
// buffer, freeing the previous layer's.
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/pprof"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("sites: ")
	devName := flag.String("device", "cpu", "device: cpu, cuda:N or metal:N")
	dir := flag.String("o", ".", "directory for inuse.pb.gz and peak.pb.gz")
	rate := flag.Int64("rate", 0, "sampling rate of allocation sites: on average one sample per rate bytes; 1 records every allocation, 0 the default")
	flag.Parse()
	dev, err := memtrack.ParseDevice(*devName)
	check(err)

	check(dev.Sites().SetRate(*rate))
	check(dev.Sites().Enable(32))
	defer dev.Sites().Disable()

	weights := loadWeights(dev, 8, 16<<20)
	cache := allocKVCache(dev, 64<<20)
	forwardPass(dev, 8, 24<<20)

	check(os.MkdirAll(*dir, 0o755))
	for name, kind := range map[string]pprof.Kind{"inuse.pb.gz": pprof.InUse, "peak.pb.gz": pprof.Peak} {
		f, err := os.Create(filepath.Join(*dir, name))
		check(err)
		check(pprof.WriteProfile(f, dev, kind))
		check(f.Close())
	}
	st := dev.Sites().Stats()
	log.Printf("%v: %d live buffers, %d bytes; peak %d bytes (sampling rate %d); profiles in %s", dev, st.Buffers, st.Bytes, st.PeakBytes, st.Rate, *dir)

	for _, b := range append(weights, cache) {
		check(b.Free())
	}
}

// loadWeights allocates the model's layers' weights, kept for the run.
func loadWeights(dev memtrack.Device, layers int, size int64) []*memtrack.Buffer {
	var bufs []*memtrack.Buffer
	for range layers {
		b, err := dev.Alloc(size)
		check(err)
		bufs = append(bufs, b)
	}
	return bufs
}

// allocKVCache allocates the KV cache, kept for the run.
func allocKVCache(dev memtrack.Device, size int64) *memtrack.Buffer {
	b, err := dev.Alloc(size)
	check(err)
	return b
}

// forwardPass runs the layers: each allocates its activation and scratch,
// and frees the previous layer's.
func forwardPass(dev memtrack.Device, layers int, act int64) {
	var prev *memtrack.Buffer
	for range layers {
		out := activation(dev, act)
		scratch := attentionScratch(dev, act/2)
		if prev != nil {
			check(prev.Free())
		}
		check(scratch.Free())
		prev = out
	}
	check(prev.Free())
}

func activation(dev memtrack.Device, size int64) *memtrack.Buffer {
	b, err := dev.Alloc(size)
	check(err)
	return b
}

func attentionScratch(dev memtrack.Device, size int64) *memtrack.Buffer {
	b, err := dev.Alloc(size)
	check(err)
	return b
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
