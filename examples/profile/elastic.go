package main

import (
	"fmt"

	"github.com/memtrack/memtrack"
)

// elasticCache is a KV cache that grows and shrinks while the program runs:
// address space for the whole budget, reserved once in the cache's
// category (Category.Reserve), into which blocks are mapped from the start
// and unmapped from the end (Reservation.Map, Reservation.Unmap). Each
// block mapped is counted in the category's Tracked; the address space is
// the device's AddressSpace.
type elasticCache struct {
	r      *memtrack.Reservation
	block  int64 // bytes of one block: a multiple of the device's granularity
	blocks int64 // blocks mapped, from offset 0
}

// newElasticCache reserves room for max blocks of block bytes (rounded up
// to the device's granularity) in cat.
func newElasticCache(cat memtrack.Category, max, block int64) (*elasticCache, error) {
	g, err := cat.Device().MapGranularity()
	if err != nil {
		return nil, err
	}
	block = (block + g - 1) / g * g
	r, err := cat.Reserve(max * block)
	if err != nil {
		return nil, err
	}
	return &elasticCache{r: r, block: block}, nil
}

// capacity returns the most blocks the reservation holds.
func (c *elasticCache) capacity() int64 { return c.r.Size() / c.block }

// resize maps or unmaps blocks, one at a time, until target are mapped
// (at most the capacity), calling step after each; on an error it stops,
// with the blocks mapped so far. It is what a program, or a budget that
// follows the device, calls with the number of blocks the cache may hold
// now.
func (c *elasticCache) resize(target int64, step func(blocks int64)) error {
	target = min(max(target, 0), c.capacity())
	for c.blocks < target {
		if err := c.r.Map(c.blocks*c.block, c.block); err != nil {
			return err
		}
		c.blocks++
		touchBlock(c.r.Bytes((c.blocks-1)*c.block, c.block))
		step(c.blocks)
	}
	for c.blocks > target {
		if err := c.r.Unmap((c.blocks-1)*c.block, c.block); err != nil {
			return err
		}
		c.blocks--
		step(c.blocks)
	}
	return nil
}

// close unmaps every block and releases the address space.
func (c *elasticCache) close() error {
	if err := c.resize(0, func(int64) {}); err != nil {
		return err
	}
	return c.r.Release()
}

// touchBlock writes one byte per page of a block the host can address
// (the CPU's), so that its pages are memory, as a cache's writes make
// them; a GPU's block is not the host's to write.
func touchBlock(p []byte) {
	for i := 0; i < len(p); i += 4096 {
		p[i] = 1
	}
}

// mapElastic reserves an elastic cache for the budget's blocks and maps it
// block by block up to target, printing the tracked bytes and the
// device's figure (on the CPU, the process's resident memory) at each. It
// returns the cache, for the caller to shrink and close.
func mapElastic(dev memtrack.Device, cat memtrack.Category, budget, target, block int64) *elasticCache {
	c, err := newElasticCache(cat, budget, block)
	check(err)
	s := dev.MemoryStats()
	fmt.Printf("elastic KV cache (Category.Reserve, Reservation.Map and Unmap):\n")
	fmt.Printf("  reserved: %s of address space for %d blocks of %s (AddressSpace %s, %d reservation(s)); tracked %s\n",
		size(c.r.Size()), c.capacity(), size(c.block), size(s.AddressSpace), s.Reservations, size(s.Tracked))
	fmt.Printf("  before mapping: %s\n", usedFigure(dev))
	check(c.resize(target, c.step(dev)))
	return c
}

// shrink unmaps half of the cache's blocks and shows, with a return
// check, that the driver (on the CPU, the OS) has the memory back.
func (c *elasticCache) shrink(dev memtrack.Device) {
	rc, err := dev.StartReturnCheck()
	check(err)
	check(c.resize(c.blocks/2, c.step(dev)))
	ret, err := rc.End()
	check(err)
	fmt.Printf("  %s", indent(ret.String()))
}

// step returns the line printed at each block mapped or unmapped.
func (c *elasticCache) step(dev memtrack.Device) func(blocks int64) {
	return func(blocks int64) {
		fmt.Printf("  %3d blocks mapped: tracked %s, %s\n", blocks, size(dev.MemoryStats().Tracked), usedFigure(dev))
	}
}

// usedFigure is the device's figure of memory in use: on the CPU, the
// process's resident memory.
func usedFigure(dev memtrack.Device) string {
	u, err := dev.Usage()
	if err != nil {
		return "unavailable: " + err.Error()
	}
	what := "used (device-wide)"
	if dev.Kind() == memtrack.KindCPU {
		what = "resident (the process's)"
	}
	return size(u.Used) + " " + what
}

// mappedBlock is a block of block bytes as the elastic cache maps it: in
// whole granules of the device's.
func mappedBlock(dev memtrack.Device, block int64) int64 {
	g, err := dev.MapGranularity()
	check(err)
	return (block + g - 1) / g * g
}

// indent indents every line but the first of s by two spaces.
func indent(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == '\n' && i+1 < len(s) {
			out = append(out, ' ', ' ')
		}
	}
	return string(out)
}
