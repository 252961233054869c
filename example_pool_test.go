package memtrack_test

import (
	"fmt"

	"github.com/memtrack/memtrack"
)

// bufferPool keeps the buffers it is given back, by size, and hands them out
// again, as mumax3's cuda.Buffer and cuda.Recycle do; it allocates through a
// category of its own.
type bufferPool struct {
	cat  memtrack.Category
	idle map[int64][]*memtrack.Buffer
}

func (p *bufferPool) get(size int64) (*memtrack.Buffer, error) {
	if l := p.idle[size]; len(l) > 0 {
		p.idle[size] = l[:len(l)-1]
		return l[len(l)-1], nil
	}
	return p.cat.Alloc(size)
}

func (p *bufferPool) recycle(b *memtrack.Buffer) {
	p.idle[b.Size()] = append(p.idle[b.Size()], b)
}

func (p *bufferPool) freeAll() {
	for _, l := range p.idle {
		for _, b := range l {
			b.Free()
		}
	}
	p.idle = make(map[int64][]*memtrack.Buffer)
}

// Memory that a program's own pool keeps after a recycle has not been freed,
// so it stays tracked until the pool frees it. Allocated through a category,
// the pool's share is counted apart from the rest of the device's memory.
func ExampleCategory_pool() {
	dev := memtrack.CPU()
	cat, err := dev.Category("buffer_pool")
	if err != nil {
		panic(err)
	}
	pool := &bufferPool{cat: cat, idle: make(map[int64][]*memtrack.Buffer)}
	before := dev.MemoryAllocated()
	show := func(step string) {
		s := cat.Stats()
		fmt.Printf("%-9s device %6d, pool %5d in %d buffers, %d allocs\n", step+":", dev.MemoryAllocated()-before, s.Tracked, s.Buffers, s.Allocs)
	}

	weights, _ := dev.Alloc(64 << 10)
	a, _ := pool.get(16 << 10)
	b, _ := pool.get(16 << 10)
	show("in use")
	pool.recycle(a)
	pool.recycle(b)
	show("recycled")
	c, _ := pool.get(16 << 10)
	show("reused")
	pool.recycle(c)
	pool.freeAll()
	show("freed")
	weights.Free()
	// Output:
	// in use:   device  98304, pool 32768 in 2 buffers, 2 allocs
	// recycled: device  98304, pool 32768 in 2 buffers, 2 allocs
	// reused:   device  98304, pool 32768 in 2 buffers, 2 allocs
	// freed:    device  65536, pool     0 in 0 buffers, 2 allocs
}
