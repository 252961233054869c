package bench

import (
	"testing"

	"go.uber.org/atomic"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/tracker"
)

// size is the byte count of every counted allocation; counters cost the same
// whatever it is.
const size = 4096

// limit is the limit set on the limit-aware paths: never reached.
const limit = 1 << 40

// devices is the number of devices in the parallel benchmarks: one per
// goroutine up to -cpu 8.
const devices = 8

// Sinks keep the compiler from dropping the work whose result nothing reads.
var (
	sinkInt   int64
	sinkBytes []byte
)

// must stops the benchmark if a design refuses an operation it must accept.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// BenchmarkSerial measures one goroutine on one device: op=pair is one
// Alloc+Free pair (design -rising: the peak rises on every pair; -limit: a
// limit is set), op=read reads the current figure and the peak, op=snapshot
// reads every statistic. Each loop is written out so that every design pays
// exactly its own calls. The plain floor, design int64, keeps a current
// figure and a peak with Counter's checks: a bare add/sub pair compiles to
// nothing. The raw floors: atomic, the sync/atomic add pair (Counter's two
// adds); atomicpeak, that pair plus the peak check (a load of the peak's
// cache line); atomic5, as many adds as tracker.Record's pair makes (two on
// Alloc, three on Free, on separate words of one cache line).
func BenchmarkSerial(b *testing.B) {
	cases := []struct {
		op, design string
		run        func(b *testing.B)
	}{
		{"pair", "int64", func(b *testing.B) {
			var u usage
			for b.Loop() {
				must(u.alloc(size))
				must(u.free(size))
			}
			sinkInt = u.peak
		}},
		{"pair", "atomic", func(b *testing.B) {
			var v atomic.Int64
			for b.Loop() {
				v.Add(size)
				v.Add(-size)
			}
		}},
		{"pair", "atomicpeak", func(b *testing.B) {
			var c rawPeak
			for b.Loop() {
				c.pair(size)
			}
		}},
		{"pair", "atomic5", func(b *testing.B) {
			var r rawRecord
			for b.Loop() {
				r.pair(size)
			}
		}},
		{"pair", "Counter", counterPair(size)},
		{"pair", "Counter-rising", counterPair(size - 1)},
		{"pair", "Counter-limit", func(b *testing.B) {
			var c tracker.Counter
			for b.Loop() {
				must(c.AllocWithin(size, limit))
				must(c.Free(size))
			}
		}},
		{"pair", "mutexmap", func(b *testing.B) {
			c := newMapCounters(1)
			for b.Loop() {
				must(c.alloc(0, size))
				must(c.free(0, size))
			}
		}},
		{"pair", "mutexdev", mutexCounterPair(size)},
		{"pair", "mutexdev-rising", mutexCounterPair(size - 1)},
		{"pair", "Record", recordPair(0)},
		{"pair", "Record-limit", recordPair(limit)},
		{"pair", "mutexrecord", mutexRecordPair(0)},
		{"pair", "mutexrecord-limit", mutexRecordPair(limit)},
		{"read", "Counter", func(b *testing.B) {
			var c tracker.Counter
			must(c.Alloc(size))
			for b.Loop() {
				sinkInt += c.Current() + c.Peak()
			}
		}},
		{"read", "mutexmap", func(b *testing.B) {
			c := newMapCounters(1)
			must(c.alloc(0, size))
			for b.Loop() {
				cur, peak := c.load(0)
				sinkInt += cur + peak
			}
		}},
		{"read", "mutexdev", func(b *testing.B) {
			var c mutexCounter
			must(c.alloc(size))
			for b.Loop() {
				cur, peak := c.load()
				sinkInt += cur + peak
			}
		}},
		{"snapshot", "Record", func(b *testing.B) {
			var r tracker.Record
			must(r.Alloc(size))
			for b.Loop() {
				sinkInt += r.Snapshot().Allocs
			}
		}},
		{"snapshot", "mutexrecord", func(b *testing.B) {
			var r mutexRecord
			must(r.alloc(size))
			for b.Loop() {
				sinkInt += r.snapshot().Allocs
			}
		}},
	}
	for _, c := range cases {
		b.Run("op="+c.op+"/design="+c.design, func(b *testing.B) {
			b.ReportAllocs()
			c.run(b)
		})
	}
}

// counterPair and mutexCounterPair measure Alloc+Free pairs that free the
// given amount: size for the steady state, size-1 for a peak that rises on
// every pair.
func counterPair(free int64) func(b *testing.B) {
	return func(b *testing.B) {
		var c tracker.Counter
		for b.Loop() {
			must(c.Alloc(size))
			must(c.Free(free))
		}
	}
}

func mutexCounterPair(free int64) func(b *testing.B) {
	return func(b *testing.B) {
		var c mutexCounter
		for b.Loop() {
			must(c.alloc(size))
			must(c.free(free))
		}
	}
}

// recordPair and mutexRecordPair measure Alloc+Free pairs on a record with
// the given limit (0: none).
func recordPair(lim int64) func(b *testing.B) {
	return func(b *testing.B) {
		var r tracker.Record
		must(r.SetLimit(lim))
		for b.Loop() {
			must(r.Alloc(size))
			must(r.Free(size))
		}
	}
}

func mutexRecordPair(lim int64) func(b *testing.B) {
	return func(b *testing.B) {
		var r mutexRecord
		r.setLimit(lim)
		for b.Loop() {
			must(r.alloc(size))
			must(r.free(size))
		}
	}
}

// parallelDesigns are the designs of BenchmarkParallel. Each make returns a
// fresh instance for n devices, as a function that performs one Alloc+Free
// pair on device dev; every design, the floor included, pays the same
// indirect call per pair.
var parallelDesigns = []struct {
	name string
	make func(n int) func(dev int)
}{
	{"atomic", func(n int) func(int) {
		s := make([]atomicSlot, n)
		return func(dev int) { s[dev].v.Add(size); s[dev].v.Add(-size) }
	}},
	{"atomicpeak", func(n int) func(int) {
		c := make([]rawPeak, n)
		return func(dev int) { c[dev].pair(size) }
	}},
	{"atomic5", func(n int) func(int) {
		r := make([]rawRecord, n)
		return func(dev int) { r[dev].pair(size) }
	}},
	{"Counter", func(n int) func(int) {
		c := make([]tracker.Counter, n)
		return func(dev int) { must(c[dev].Alloc(size)); must(c[dev].Free(size)) }
	}},
	{"packed", func(n int) func(int) {
		c := make([]packedCounter, n)
		return func(dev int) { must(c[dev].alloc(size)); must(c[dev].free(size)) }
	}},
	{"Record", func(n int) func(int) {
		r := make([]tracker.Record, n)
		return func(dev int) { must(r[dev].Alloc(size)); must(r[dev].Free(size)) }
	}},
	{"mutexmap", func(n int) func(int) {
		c := newMapCounters(n)
		return func(dev int) { must(c.alloc(dev, size)); must(c.free(dev, size)) }
	}},
	{"mutexdev", func(n int) func(int) {
		c := make([]mutexCounter, n)
		return func(dev int) { must(c[dev].alloc(size)); must(c[dev].free(size)) }
	}},
	{"mutexrecord", func(n int) func(int) {
		r := make([]mutexRecord, n)
		return func(dev int) { must(r[dev].alloc(size)); must(r[dev].free(size)) }
	}},
}

// BenchmarkParallel measures Alloc+Free pairs from GOMAXPROCS goroutines
// (run it with -cpu 1,2,4,8): load=one puts them all on device 0,
// load=spread puts each on a device of its own. The design packed is
// tracker.Counter's algorithm without the padding.
func BenchmarkParallel(b *testing.B) {
	for _, load := range []struct {
		name   string
		spread bool
	}{{"one", false}, {"spread", true}} {
		for _, d := range parallelDesigns {
			b.Run("load="+load.name+"/design="+d.name, func(b *testing.B) {
				b.ReportAllocs()
				pair := d.make(devices)
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					dev := 0
					if load.spread {
						dev = int(next.Add(1)-1) % devices
					}
					for pb.Next() {
						pair(dev)
					}
				})
			})
		}
	}
}

// BenchmarkDevice measures an Alloc+Free of a CPU buffer through memtrack's
// Device layer (design=tracked) against the same allocation without
// tracking (design=untracked: make below 1 MiB, mmap/munmap from there, as
// the CPU backend does), at 64 B (against a bare make),
// 4 KiB, 1 MiB and 64 MiB. In the plain designs the memory is not touched, the
// worst case for the ratio; the -touched designs write one byte to each
// 4 KiB page between Alloc and Free, as a program that uses the memory does.
func BenchmarkDevice(b *testing.B) {
	tracked := func(n int64, touch bool) error {
		buf, err := memtrack.CPU().Alloc(n)
		if err != nil {
			return err
		}
		if touch {
			touchPages(buf.Bytes())
		}
		return buf.Free()
	}
	untracked := func(n int64, touch bool) error {
		m, err := allocUntracked(int(n))
		if err != nil {
			return err
		}
		if touch {
			touchPages(m)
		}
		sinkBytes = m // escapes to the heap, as the tracked buffer does
		return freeUntracked(m)
	}
	designs := []struct {
		name  string
		pair  func(n int64, touch bool) error
		touch bool
	}{
		{"tracked", tracked, false},
		{"untracked", untracked, false},
		{"tracked-touched", tracked, true},
		{"untracked-touched", untracked, true},
	}
	for _, s := range []struct {
		name string
		n    int64
	}{{"64B", 64}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}} {
		for _, d := range designs {
			if d.touch && s.n < 4096 {
				continue // a buffer within one page: nothing to add
			}
			b.Run("size="+s.name+"/design="+d.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					must(d.pair(s.n, d.touch))
				}
			})
		}
	}
}

// touchPages writes one byte to every 4 KiB page of p.
func touchPages(p []byte) {
	for i := 0; i < len(p); i += 4096 {
		p[i] = 1
	}
}
