package addrindex

import "sync"

// ShardBits is the number of address-hash bits that choose a shard.
const ShardBits = 6

// Shards is the number of shards of an [Index].
const Shards = 1 << ShardBits

// minSlots is the size of a shard's first table.
const minSlots = 8

// Index maps addresses to values of type E. Its zero value is empty and
// ready to use.
type Index[E any] struct {
	shards [Shards]Shard[E]
}

// Shard is one table of an [Index]. Lock it around every other method.
type Shard[E any] struct {
	sync.Mutex
	slots []slot[E]
	used  int
	shift uint8 // 64 - log2(len(slots))
	_     [cacheLinePad]byte
}

type slot[E any] struct {
	key uintptr
	e   E
}

// cacheLinePad pads a shard (a mutex, a slice, a count and a shift) to
// 64 bytes.
const cacheLinePad = 64 - 48

// Hash is the hash of an address that chooses its shard (top bits) and its
// home slot (the bits below them).
func Hash(ptr uintptr) uint64 {
	// Allocations are aligned (256 bytes and more for CUDA, 16 for malloc):
	// a Fibonacci hash of the address spreads them.
	return uint64(ptr) * 0x9e3779b97f4a7c15
}

// Shard returns the shard of ptr.
func (x *Index[E]) Shard(ptr uintptr) *Shard[E] {
	return &x.shards[Hash(ptr)>>(64-ShardBits)]
}

// home is the first slot probed for ptr.
func (sh *Shard[E]) home(ptr uintptr) int {
	return int((Hash(ptr) << ShardBits) >> sh.shift)
}

// Lookup returns the slot of ptr and true, or the free slot where ptr would
// go and false; -1 and false while the shard has no table.
func (sh *Shard[E]) Lookup(ptr uintptr) (int, bool) {
	if len(sh.slots) == 0 {
		return -1, false
	}
	mask := len(sh.slots) - 1
	for i := sh.home(ptr); ; i = (i + 1) & mask {
		switch sh.slots[i].key {
		case ptr:
			return i, true
		case 0:
			return i, false
		}
	}
}

// At returns the value in slot i, which Lookup found.
func (sh *Shard[E]) At(i int) *E { return &sh.slots[i].e }

// InsertAt puts e at ptr (not 0) into slot i, which Lookup returned for ptr
// with no change to the shard since.
func (sh *Shard[E]) InsertAt(i int, ptr uintptr, e E) {
	if i >= 0 && sh.slots[i].key == ptr {
		sh.slots[i].e = e
		return
	}
	if i < 0 || 2*(sh.used+1) > len(sh.slots) {
		sh.grow()
		i, _ = sh.Lookup(ptr)
	}
	sh.slots[i] = slot[E]{key: ptr, e: e}
	sh.used++
}

// grow doubles the table (or makes the first one) and moves every slot.
func (sh *Shard[E]) grow() {
	old := sh.slots
	n := max(2*len(old), minSlots)
	sh.slots = make([]slot[E], n)
	sh.shift = uint8(64 - log2(n))
	for _, s := range old {
		if s.key != 0 {
			i, _ := sh.Lookup(s.key)
			sh.slots[i] = s
		}
	}
}

func log2(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}

// DeleteAt empties slot i, which Lookup found, and moves back the slots
// after it that the hole would cut off from their home slot.
func (sh *Shard[E]) DeleteAt(i int) {
	mask := len(sh.slots) - 1
	for j := (i + 1) & mask; sh.slots[j].key != 0; j = (j + 1) & mask {
		// The slot at j may move to the hole at i if its home is not in
		// the cyclic range (i, j].
		if (j-sh.home(sh.slots[j].key))&mask >= (j-i)&mask {
			sh.slots[i] = sh.slots[j]
			i = j
		}
	}
	var zero slot[E]
	sh.slots[i] = zero
	sh.used--
}
