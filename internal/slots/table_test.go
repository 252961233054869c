package slots

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPutAtFree(t *testing.T) {
	var tb Table[int]
	a, b := new(int), new(int)
	ia := tb.Put(a, 0x10)
	ib := tb.Put(b, 0x20)
	assert.Equal(t, uint32(1), ia, "slot 0 is never used")
	assert.Equal(t, uint32(2), ib)
	v, o := tb.At(ia)
	assert.Same(t, a, v)
	assert.Equal(t, uintptr(0x10), o)
	for _, i := range []uint32{0, 3, 1 << 30} {
		v, o := tb.At(i)
		assert.Nil(t, v, "slot %d", i)
		assert.Zero(t, o)
	}

	tb.Free(ia)
	v, o = tb.At(ia)
	assert.Nil(t, v)
	assert.Zero(t, o)
	c := new(int)
	assert.Equal(t, ia, tb.Put(c, 0x30), "a freed slot is reused")
}

func TestKeep(t *testing.T) {
	var tb Table[int]
	a, gone := new(int), new(int)
	i := tb.Put(a, 0x10)
	tb.Keep(i, gone)
	v, o := tb.At(i)
	assert.Same(t, gone, v)
	assert.Equal(t, uintptr(0x10), o, "a kept slot keeps its owner")
	assert.NotEqual(t, i, tb.Put(new(int), 0x20), "a kept slot is not reused")
}

// The table against a map of the live slots, through random puts and frees.
func TestTableMatchesModel(t *testing.T) {
	var tb Table[int]
	model := map[uint32]*int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		if len(model) == 0 || rng.IntN(3) > 0 {
			v := new(int)
			i := tb.Put(v, uintptr(rng.Uint64()))
			require.NotZero(t, i)
			require.NotContains(t, model, i, "a live slot was handed out again")
			model[i] = v
			continue
		}
		for i := range model {
			tb.Free(i)
			delete(model, i)
			break
		}
	}
	seen := 0
	tb.Each(func(v *int) { seen++ })
	assert.Equal(t, len(model), seen)
	for i, v := range model {
		got, _ := tb.At(i)
		assert.Same(t, v, got)
	}
}
