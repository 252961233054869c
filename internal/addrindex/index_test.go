package addrindex

import (
	"unsafe"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkShard compares a shard with its model: the same addresses, each
// found where lookup looks, with its entry, and the count of used slots.
func checkShard(t *testing.T, sh *Shard[int64], model map[uintptr]int64) {
	t.Helper()
	require.Equal(t, len(model), sh.used, "used slots")
	used := 0
	for _, s := range sh.slots {
		if s.key != 0 {
			used++
		}
	}
	require.Equal(t, len(model), used, "slots holding an address")
	for p, size := range model {
		i, ok := sh.Lookup(p)
		require.True(t, ok, "%#x not found", p)
		require.Equal(t, size, sh.slots[i].e, "%#x", p)
	}
	if len(sh.slots) > 0 {
		assert.LessOrEqual(t, 2*sh.used, len(sh.slots), "at most half the slots used")
	}
}

// collidingAddrs returns 24 addresses, aligned as CUDA's are, whose home
// slot in a table of 8 is the last (the first half) or the first: they
// collide in small tables, and their probes wrap around.
func collidingAddrs() []uintptr {
	var ps []uintptr
	last, first := 0, 0
	for p := uintptr(256); len(ps) < 24; p += 256 {
		switch (Hash(p) << ShardBits) >> 61 {
		case 7:
			if last < 12 {
				ps, last = append(ps, p), last+1
			}
		case 0:
			if first < 12 {
				ps, first = append(ps, p), first+1
			}
		}
	}
	return ps
}

// applyShardOps runs ops on a shard and on a map, the model: each byte
// inserts (even) or deletes (odd) one of the colliding addresses.
func applyShardOps(t *testing.T, ops []byte) {
	var sh Shard[int64]
	model := map[uintptr]int64{}
	addrs := collidingAddrs()
	for n, op := range ops {
		p := addrs[op>>1%24]
		i, ok := sh.Lookup(p)
		_, inModel := model[p]
		require.Equal(t, inModel, ok, "op %d: lookup of %#x", n, p)
		if op&1 == 0 {
			sh.InsertAt(i, p, int64(n+1))
			model[p] = int64(n + 1)
		} else if ok {
			sh.DeleteAt(i)
			delete(model, p)
		}
		checkShard(t, &sh, model)
	}
}

// The open-addressing table of a shard behaves as a map, through inserts,
// replacements, deletions that shift probe chains back, and growth.
func TestShard(t *testing.T) {
	tests := []struct {
		name string
		ops  []byte
	}{
		{"empty", nil},
		{"delete from an empty table", []byte{1, 3}},
		{"insert and replace", []byte{0, 0, 2, 2}},
		{"grow", []byte{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32}},
		{"empty it", []byte{0, 2, 4, 6, 8, 1, 3, 5, 7, 9}},
		{"delete in the middle of chains", []byte{0, 2, 4, 6, 8, 10, 12, 14, 5, 9, 3, 4, 13, 1, 11, 15, 7}},
		{"refill after deleting", []byte{0, 2, 4, 1, 3, 5, 0, 2, 4, 6, 8, 1}},
		{"wrap around", []byte{0, 2, 24, 26, 4, 28, 1, 25, 3, 27, 5, 29}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { applyShardOps(t, tt.ops) })
	}
}

func FuzzShard(f *testing.F) {
	f.Add([]byte{0, 2, 4, 6, 8, 10, 12, 14, 5, 9, 3, 4, 13, 1, 11, 15, 7})
	f.Add([]byte{0, 0, 1, 1, 46, 47, 44, 45})
	f.Fuzz(func(t *testing.T, ops []byte) { applyShardOps(t, ops) })
}

// A shard fills one cache line, whatever its values, so that two shards'
// locks never share one.
func TestShardIsOneCacheLine(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the padding is sized for 64-bit platforms")
	}
	assert.Equal(t, uintptr(64), unsafe.Sizeof(Shard[int64]{}))
	assert.Equal(t, uintptr(64), unsafe.Sizeof(Shard[struct{ a, b, c *int }]{}))
}
