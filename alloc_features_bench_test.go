package memtrack

import "testing"

// BenchmarkPairFeature measures a CPU Alloc+Free of 4 KiB, and a
// Track+Release of 4 KiB, with one feature on at a time, and with all of
// them on: what each feature adds to the pair of BenchmarkPair. The sites
// are recorded at rate 1, so that every allocation records its stack (at
// the default rate a 4 KiB buffer is rarely sampled, and the count would
// measure the sampling's random number). It uses only the exported API, so
// that scripts/bench-instructions.sh can run it at a base commit that
// lacks it, with BenchmarkPair's file, whose loops it shares
// (OVERLAY='alloc_bench_test.go alloc_features_bench_test.go').
func BenchmarkPairFeature(b *testing.B) {
	d := CPU()
	for _, f := range []struct {
		name string
		on   func(b *testing.B) (off func())
	}{
		{"sites", onSites},
		{"history", onHistory},
		{"leaks", onLeaks},
		{"scope", onScope},
		{"observer", onObserver},
		{"all", func(b *testing.B) func() {
			offs := []func(){onSites(b), onHistory(b), onLeaks(b), onScope(b), onObserver(b)}
			return func() {
				for _, off := range offs {
					off()
				}
			}
		}},
	} {
		b.Run("feature="+f.name+"/op=alloc", func(b *testing.B) {
			defer f.on(b)()
			benchAllocPairs(b, d.Alloc, 4<<10)
		})
		b.Run("feature="+f.name+"/op=category", func(b *testing.B) {
			c := benchCategory(b)
			defer f.on(b)()
			benchAllocPairs(b, c.Alloc, 4<<10)
		})
		b.Run("feature="+f.name+"/op=track", func(b *testing.B) {
			defer f.on(b)()
			benchTrackPairs(b, d, 4<<10, true)
		})
	}
}

func onSites(b *testing.B) func() {
	d := CPU()
	if err := d.Sites().SetRate(1); err != nil {
		b.Fatal(err)
	}
	if err := d.Sites().Enable(32); err != nil {
		b.Fatal(err)
	}
	return func() {
		d.Sites().Disable()
		if err := d.Sites().SetRate(0); err != nil {
			b.Fatal(err)
		}
	}
}

func onHistory(b *testing.B) func() {
	d := CPU()
	if err := d.History().Enable(1 << 16); err != nil {
		b.Fatal(err)
	}
	return d.History().Disable
}

func onLeaks(b *testing.B) func() {
	d := CPU()
	if err := d.Leaks().Enable(LeakWatch{Handler: func(Leak) {}}); err != nil {
		b.Fatal(err)
	}
	return d.Leaks().Disable
}

func onScope(b *testing.B) func() {
	sc, err := CPU().OpenPeakScope()
	if err != nil {
		b.Fatal(err)
	}
	return func() { _ = sc.Close() }
}

// onObserver registers an out-of-memory observer, which no pair runs: it
// shows what an observer costs the allocations that are not refused.
func onObserver(b *testing.B) func() {
	o, err := CPU().OnOutOfMemory(func(*OutOfMemoryError) {})
	if err != nil {
		b.Fatal(err)
	}
	return func() { _ = o.Remove() }
}
