package memtrack

import (
	"fmt"
	"sync"

	"github.com/memtrack/memtrack/tracker"
)

// addrIndex maps the addresses of one kind's tracked memory to its counts
// ([Device.Track], [Device.TrackAddr]), in shards chosen by address bits,
// so that tracking and freeing at different addresses rarely meet on a
// lock. Each shard is an open-addressing table of values, probed once per
// operation under the shard's lock, so that indexing an address allocates
// nothing but the table's growth.
type addrIndex struct {
	shards [addrShards]addrShard
}

// addrEntry is the count at one address: the handle, if one was made
// ([Device.Track], or [Kind.TrackedAt] of a count of [Device.TrackAddr]), and
// what uncounting it needs.
type addrEntry struct {
	h       *Tracked
	rec     *tracker.Record
	site    *site
	size    int64
	ordinal int
}

const addrShardBits = 6

const addrShards = 1 << addrShardBits

// addrShard is a table with linear probing: slots holds a power of two of
// slots (none until the first address), at most half of them used, a free
// slot has key 0 (address 0 is never indexed), and a deletion shifts the
// slots after it back instead of leaving a marker.
type addrShard struct {
	mu    sync.Mutex
	slots []addrSlot
	used  int
	shift uint8 // 64 - log2(len(slots))
	_     [cacheLinePad]byte
}

type addrSlot struct {
	key uintptr
	e   addrEntry
}

// cacheLinePad pads a shard (a mutex, a slice, a count and a shift) to
// 64 bytes.
const cacheLinePad = 64 - 48

// addrMinSlots is the size of a shard's first table.
const addrMinSlots = 8

func addrHash(ptr uintptr) uint64 {
	// Allocations are aligned (256 bytes and more for CUDA, 16 for malloc):
	// a Fibonacci hash of the address spreads them. Its top bits choose
	// the shard, the bits below them the slot.
	return uint64(ptr) * 0x9e3779b97f4a7c15
}

func (x *addrIndex) shard(ptr uintptr) *addrShard {
	return &x.shards[addrHash(ptr)>>(64-addrShardBits)]
}

// home is the first slot probed for ptr.
func (sh *addrShard) home(ptr uintptr) int {
	return int((addrHash(ptr) << addrShardBits) >> sh.shift)
}

// lookup returns the slot of ptr and true, or the free slot where ptr would
// go and false; -1 and false while the shard has no table. The shard is
// locked.
func (sh *addrShard) lookup(ptr uintptr) (int, bool) {
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

// claim returns the slot for a new count at ptr, as lookup does, and fails
// with [ErrAlreadyTracked] if ptr is tracked and live. The shard is locked.
func (sh *addrShard) claim(d Device, ptr uintptr) (int, error) {
	i, ok := sh.lookup(ptr)
	if !ok {
		return i, nil
	}
	old := &sh.slots[i].e
	if old.h != nil && old.h.state.Load() != trackLive {
		return i, nil // being freed: the new count replaces it
	}
	return i, fmt.Errorf("%w: %#x on %v (%d bytes, tracked on %v)", ErrAlreadyTracked, ptr, d, old.size, Device{kind: d.kind, ordinal: old.ordinal})
}

// insertAt puts e at ptr into slot i, which lookup or claim returned for
// ptr with no change to the shard since. The shard is locked.
func (sh *addrShard) insertAt(i int, ptr uintptr, e addrEntry) {
	if i >= 0 && sh.slots[i].key == ptr {
		sh.slots[i].e = e
		return
	}
	if i < 0 || 2*(sh.used+1) > len(sh.slots) {
		sh.grow()
		i, _ = sh.lookup(ptr)
	}
	sh.slots[i] = addrSlot{key: ptr, e: e}
	sh.used++
}

// grow doubles the table (or makes the first one) and moves every slot.
func (sh *addrShard) grow() {
	old := sh.slots
	n := max(2*len(old), addrMinSlots)
	sh.slots = make([]addrSlot, n)
	sh.shift = uint8(64 - log2(n))
	for _, s := range old {
		if s.key != 0 {
			i, _ := sh.lookup(s.key)
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

// deleteAt empties slot i, which lookup found, and moves back the slots
// after it that the hole would cut off from their home slot. The shard is
// locked.
func (sh *addrShard) deleteAt(i int) {
	mask := len(sh.slots) - 1
	for j := (i + 1) & mask; sh.slots[j].key != 0; j = (j + 1) & mask {
		// The slot at j may move to the hole at i if its home is not in
		// the cyclic range (i, j].
		if (j-sh.home(sh.slots[j].key))&mask >= (j-i)&mask {
			sh.slots[i] = sh.slots[j]
			i = j
		}
	}
	sh.slots[i] = addrSlot{}
	sh.used--
}
