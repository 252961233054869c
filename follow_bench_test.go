package memtrack

import "testing"

// BenchmarkFollowerRead is one reading of a follower of the CPU: the
// OS's figures (Device.Usage) and the formula. BenchmarkCUDAFollowerRead
// (follow_cuda_test.go) is the fake GPU's.
func BenchmarkFollowerRead(b *testing.B) {
	d := CPU()
	base, err := d.Baseline()
	if err != nil {
		b.Fatal(err)
	}
	m, err := d.Measure(func() error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	f, err := m.Follow(base, 0.5, 16<<20)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := f.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
