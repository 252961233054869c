package fit

import (
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

// device is a plain model of a driver: it allocates buffers one by one,
// each taking its rounded size of the device, the pool reserving whole
// chunks as its used figure outgrows its reservation, and it frees the
// transient ones, the pool then keeping what it reserved before the load
// and the chunks its used figure needs. Its figures are exact (math/big),
// with none of the closed forms of Predict.
type device struct {
	used, peak             *big.Int // the process's memory the load added, and its high-water mark
	poolUsed, poolReserved *big.Int
	poolBefore             *big.Int
}

func newDevice(b Before) *device {
	return &device{used: new(big.Int), peak: new(big.Int),
		poolUsed: big.NewInt(b.PoolUsed), poolReserved: big.NewInt(b.PoolReserved), poolBefore: big.NewInt(b.PoolReserved)}
}

func roundBig(n int64, unit int64) *big.Int {
	v := big.NewInt(n)
	if unit <= 1 {
		return v
	}
	u := big.NewInt(unit)
	v.Add(v, big.NewInt(unit-1))
	v.Div(v, u)
	return v.Mul(v, u)
}

func (d *device) take(n *big.Int) {
	d.used.Add(d.used, n)
	if d.used.Cmp(d.peak) > 0 {
		d.peak.Set(d.used)
	}
}

// alloc allocates one buffer of p.
func (d *device) alloc(r Rules, p Part) {
	switch {
	case p.Via == ViaAllocAsync:
		d.poolUsed.Add(d.poolUsed, big.NewInt(p.Size))
		if d.poolUsed.Cmp(d.poolReserved) > 0 { // the chunks that cover it, taken of the device
			more := bigRoundUp(new(big.Int).Sub(d.poolUsed, d.poolReserved), r.PoolChunk)
			d.poolReserved.Add(d.poolReserved, more)
			d.take(more)
		}
	case p.Via == ViaAlloc && p.Size < r.HeapBelow:
		d.take(big.NewInt(p.Size))
	case p.Via == ViaMap:
		d.take(roundBig(p.Size, r.Granularity))
	default:
		d.take(roundBig(p.Size, r.AllocUnit))
	}
}

// free frees one buffer of p, and, for the pool, trims it at the end.
func (d *device) free(r Rules, p Part) {
	switch {
	case p.Via == ViaAllocAsync:
		d.poolUsed.Sub(d.poolUsed, big.NewInt(p.Size))
	case p.Via == ViaAlloc && p.Size < r.HeapBelow:
		d.used.Sub(d.used, big.NewInt(p.Size))
	case p.Via == ViaMap:
		d.used.Sub(d.used, roundBig(p.Size, r.Granularity))
	default:
		d.used.Sub(d.used, roundBig(p.Size, r.AllocUnit))
	}
}

// synchronize trims the pool to what it held before the load or the
// chunks its used figure needs, whichever is more.
func (d *device) synchronize(r Rules) {
	keep := new(big.Int).Set(d.poolBefore)
	if r.PoolChunk > 0 {
		if need := bigRoundUp(d.poolUsed, r.PoolChunk); need.Cmp(keep) > 0 {
			keep = need
		}
	}
	if d.poolReserved.Cmp(keep) > 0 {
		d.used.Sub(d.used, new(big.Int).Sub(d.poolReserved, keep))
		d.poolReserved.Set(keep)
	}
}

func bigRoundUp(v *big.Int, unit int64) *big.Int {
	u := big.NewInt(unit)
	q := new(big.Int).Add(v, big.NewInt(unit-1))
	q.Div(q, u)
	return q.Mul(q, u)
}

func clamp(v *big.Int) int64 {
	if !v.IsInt64() {
		return math.MaxInt64
	}
	return v.Int64()
}

// FuzzPredict checks Predict against the model, which allocates every
// buffer one by one (the transient ones after the others, so that all are
// live at once), frees the transient ones and synchronizes, for loads of
// up to four parts, and checks the invariants: no figure below 0, Need at
// least Stays, and a part added never lowers either.
func FuzzPredict(f *testing.F) {
	f.Add(int64(2<<20), int64(32<<20), int64(0), int64(0), int64(0), uint8(0), int64(1), uint8(1), false, uint8(1), int64(33<<20), uint8(2), true, uint8(2), int64(4<<20), uint8(3), false)
	f.Add(int64(4096), int64(0), int64(1<<20), int64(0), int64(0), uint8(0), int64(1000), uint8(7), false, uint8(0), int64(2<<20), uint8(1), true, uint8(2), int64(8192), uint8(2), false)
	f.Add(int64(2<<20), int64(32<<20), int64(0), int64(20<<20), int64(32<<20), uint8(1), int64(12<<20), uint8(1), false, uint8(1), int64(1), uint8(1), true, uint8(0), int64(1), uint8(1), true)
	f.Fuzz(func(t *testing.T, gran, chunk, heap, poolUsed, poolReserved int64,
		w0 uint8, s0 int64, c0 uint8, t0 bool, w1 uint8, s1 int64, c1 uint8, t1 bool, w2 uint8, s2 int64, c2 uint8, t2 bool) {
		// Figures a device could have: granules and chunks of up to 64 MiB,
		// buffers of up to 1 GiB, up to 15 of them a part; the model
		// allocates each chunk apart.
		r := Rules{AllocUnit: 1 + abs(gran)%(64<<20), Granularity: 1 + abs(gran/3)%(64<<20),
			PoolChunk: 1 + abs(chunk)%(64<<20), HeapBelow: abs(heap) % (2 << 20)}
		used := abs(poolUsed) % (1 << 30)
		b := Before{PoolUsed: used, PoolReserved: RoundUp(used, r.PoolChunk) + (abs(poolReserved)%4)*r.PoolChunk}
		var parts []Part
		for _, p := range []struct {
			w    uint8
			s    int64
			c    uint8
			tran bool
		}{{w0, s0, c0, t0}, {w1, s1, c1, t1}, {w2, s2, c2, t2}} {
			if p.c%16 == 0 {
				continue
			}
			part := Part{Via: Via(p.w % uint8(numVias)), Size: 1 + abs(p.s)%(1<<30), Count: int64(p.c % 16), Transient: p.tran}
			if part.Via == ViaMap {
				part.Size = RoundUp(part.Size, r.Granularity)
			}
			parts = append(parts, part)
		}
		got, err := Predict(r, b, parts, 0)
		require.NoError(t, err)

		d := newDevice(b)
		for _, tran := range []bool{false, true} {
			for _, p := range parts {
				if p.Transient == tran {
					for range p.Count {
						d.alloc(r, p)
					}
				}
			}
		}
		for _, p := range parts {
			if p.Transient {
				for range p.Count {
					d.free(r, p)
				}
			}
		}
		d.synchronize(r)
		require.Equal(t, clamp(d.used), got.Stays, "what stays, for %+v from %+v by %+v", parts, b, r)
		require.Equal(t, clamp(d.peak), got.Need, "what the load takes at its most, for %+v from %+v by %+v", parts, b, r)
		require.Equal(t, clamp(d.poolReserved), got.PoolReserved)

		require.GreaterOrEqual(t, got.Stays, int64(0))
		require.GreaterOrEqual(t, got.Transient, int64(0))
		require.GreaterOrEqual(t, got.Need, got.Stays)
		for i := range parts {
			less, err := Predict(r, b, append(append([]Part{}, parts[:i]...), parts[i+1:]...), 0)
			require.NoError(t, err)
			require.LessOrEqual(t, less.Stays, got.Stays, "a part added lowers Stays")
			require.LessOrEqual(t, less.Need, got.Need, "a part added lowers Need")
		}
	})
}

func abs(n int64) int64 {
	if n < 0 {
		if n == math.MinInt64 {
			return math.MaxInt64
		}
		return -n
	}
	return n
}
