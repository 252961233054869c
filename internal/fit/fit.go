package fit

import (
	"errors"
	"fmt"
	"math"
)

// Via is how the buffers of a part are allocated, which decides how the
// driver counts them; the root package's Via, numbered alike.
type Via uint8

const (
	// ViaAlloc is a synchronous allocation of its own: its size rounded up to
	// the granularity (as asked below HeapBelow).
	ViaAlloc Via = iota
	// ViaAllocAsync is a stream-ordered allocation from the device's memory pool,
	// which reserves device memory in whole chunks.
	ViaAllocAsync
	// ViaMap is physical memory mapped into a reservation, in whole granules.
	ViaMap
	numVias
)

var viaNames = [numVias]string{ViaAlloc: "Alloc", ViaAllocAsync: "AllocAsync", ViaMap: "Map"}

// String returns "Alloc", "AllocAsync" or "Map".
func (v Via) String() string {
	if v < numVias {
		return viaNames[v]
	}
	return fmt.Sprintf("Via(%d)", uint8(v))
}

// Rules are the driver's rules of one device that a prediction uses.
type Rules struct {
	// AllocUnit is the unit an Alloc is rounded up to: at least 1 (1
	// where the driver rounds nothing the caller knows of).
	AllocUnit int64
	// HeapBelow is the size below which an Alloc is taken as asked (the
	// CPU's buffers from the Go heap); 0 for none.
	HeapBelow int64
	// Granularity is the unit of which a Map's size is a multiple; 0
	// where the device maps nothing, and a load with a Map part is then
	// refused.
	Granularity int64
	// PoolChunk is the chunk in which the device's memory pool reserves
	// memory; 0 where it is not known, and a load with an AllocAsync part is then
	// refused.
	PoolChunk int64
}

// Part is some buffers of one size, allocated one way.
type Part struct {
	Via   Via
	Size  int64 // bytes of one buffer, at least 1
	Count int64 // how many, at least 1
	// Transient says that the buffers are freed before the load ends.
	Transient bool
}

// Before is what the device holds, just before the load, of the memory
// the load continues from.
type Before struct {
	PoolUsed     int64 // the pool's used figure
	PoolReserved int64 // the memory the pool reserves
}

// Result is what the load will add to the process's memory on the device.
type Result struct {
	// Parts is each part's bytes as the driver counts them: an Alloc's or
	// a Map's size as rounded, times the count; an AllocAsync part's bytes in the
	// pool's used figure (its reservation is PoolGrowth).
	Parts []int64
	// PoolReserved is the pool's reservation once the load is done, and
	// PoolGrowth its growth over Before.PoolReserved.
	PoolReserved, PoolGrowth int64
	// PeakPoolReserved is the pool's reservation with the transient parts live.
	PeakPoolReserved int64
	// GraphGrowth is the graphs' growth, as given.
	GraphGrowth int64
	// Stays is what the load adds once done: its Alloc and Map parts that
	// are not transient, PoolGrowth and GraphGrowth.
	Stays int64
	// Transient is what the transient parts add at their most beside
	// Stays: their Alloc and Map bytes, and the pool's reservation beyond
	// PoolReserved while they are live.
	Transient int64
	// Need is Stays + Transient: what the load takes at its most.
	Need int64
}

// ErrInvalid is the error of input the arithmetic refuses.
var ErrInvalid = errors.New("invalid input")

// Rounded returns what one buffer of size bytes allocated by w takes, by
// the rules: size rounded up to the allocation unit for an Alloc (as
// asked below HeapBelow), to the granularity for a Map; as asked in the
// pool. It saturates at math.MaxInt64.
func (r Rules) Rounded(w Via, size int64) int64 {
	switch {
	case w == ViaMap:
		return RoundUp(size, r.Granularity)
	case w == ViaAlloc && size >= r.HeapBelow:
		return RoundUp(size, r.AllocUnit)
	}
	return size
}

// RoundUp returns n rounded up to a multiple of unit (n for a unit below
// 2), held at math.MaxInt64 where that multiple is past it.
func RoundUp(n, unit int64) int64 {
	if unit <= 1 || n <= 0 {
		return n
	}
	q := n / unit
	if n%unit != 0 {
		q++
	}
	return Mul(q, unit)
}

// Check refuses parts that the rules do not accept, as Predict does, with
// no figure of the device yet: a caller checks its load before it reads
// the device.
func Check(r Rules, parts []Part) error { return check(r, Before{}, parts, 0) }

// Predict returns what the parts will add to the process's memory on a
// device with rules r whose figures are b just before the load, with
// graphGrowth, what the load's CUDA graphs will reserve beyond what the
// device reserves for graphs already. It fails, wrapping [ErrInvalid],
// for input outside what the rules accept.
func Predict(r Rules, b Before, parts []Part, graphGrowth int64) (Result, error) {
	if err := check(r, b, parts, graphGrowth); err != nil {
		return Result{}, err
	}
	res := Result{Parts: make([]int64, len(parts)), GraphGrowth: graphGrowth}
	var poolStays, poolAll int64 // the pool bytes of the parts that stay, and of all of them
	var allocStays, allocTransient int64
	for i, p := range parts {
		n := Mul(r.Rounded(p.Via, p.Size), p.Count)
		res.Parts[i] = n
		switch {
		case p.Via == ViaAllocAsync:
			poolAll = Add(poolAll, n)
			if !p.Transient {
				poolStays = Add(poolStays, n)
			}
		case p.Transient:
			allocTransient = Add(allocTransient, n)
		default:
			allocStays = Add(allocStays, n)
		}
	}
	if poolAll > 0 {
		res.PoolReserved = max(b.PoolReserved, RoundUp(Add(b.PoolUsed, poolStays), r.PoolChunk))
		res.PeakPoolReserved = max(b.PoolReserved, RoundUp(Add(b.PoolUsed, poolAll), r.PoolChunk))
	} else {
		res.PoolReserved, res.PeakPoolReserved = b.PoolReserved, b.PoolReserved
	}
	res.PoolGrowth = res.PoolReserved - b.PoolReserved
	res.Stays = Add(Add(allocStays, res.PoolGrowth), graphGrowth)
	res.Transient = Add(allocTransient, res.PeakPoolReserved-res.PoolReserved)
	res.Need = Add(res.Stays, res.Transient)
	return res, nil
}

// check refuses input outside what the rules accept.
func check(r Rules, b Before, parts []Part, graphGrowth int64) error {
	if r.AllocUnit < 1 || r.HeapBelow < 0 || r.Granularity < 0 || r.PoolChunk < 0 {
		return fmt.Errorf("%w: rules with an allocation unit of %d, a heap below %d, a granularity of %d and a pool chunk of %d bytes",
			ErrInvalid, r.AllocUnit, r.HeapBelow, r.Granularity, r.PoolChunk)
	}
	if b.PoolUsed < 0 || b.PoolReserved < 0 || graphGrowth < 0 {
		return fmt.Errorf("%w: figures before the load below 0 (pool used %d, pool reserved %d, graph growth %d)", ErrInvalid, b.PoolUsed, b.PoolReserved, graphGrowth)
	}
	for i, p := range parts {
		switch {
		case p.Via >= numVias:
			return fmt.Errorf("%w: part %d: %v is no way of allocating", ErrInvalid, i, p.Via)
		case p.Size < 1 || p.Count < 1:
			return fmt.Errorf("%w: part %d: %d buffers of %d bytes: want at least one buffer of at least 1 byte", ErrInvalid, i, p.Count, p.Size)
		case p.Via == ViaAllocAsync && r.PoolChunk < 1:
			return fmt.Errorf("%w: part %d is allocated from the memory pool, whose chunk is not known", ErrInvalid, i)
		case p.Via == ViaMap && r.Granularity < 1:
			return fmt.Errorf("%w: part %d is mapped, on a device that maps nothing", ErrInvalid, i)
		case p.Via == ViaMap && p.Size%r.Granularity != 0:
			return fmt.Errorf("%w: part %d maps %d bytes, not a multiple of the granularity of %d bytes", ErrInvalid, i, p.Size, r.Granularity)
		}
	}
	return nil
}

// Add returns a + b for a, b >= 0, held at math.MaxInt64.
func Add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Mul returns a × b for a, b >= 0, held at math.MaxInt64.
func Mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
