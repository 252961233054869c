package memtrack

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/hostvm"
)

// elasticChild names the test that a child process runs
// (internal/childtest): the calls of elastic memory that must register no
// device are each made in a process of their own, where no device was used
// before.
const elasticChild = "MEMTRACK_ELASTIC_CHILD"

// elasticCall is a call of elastic memory that registers no device: a
// query, or a call refused.
type elasticCall struct {
	name string
	// call makes the call on d, whose granularity is g (the backend's,
	// asked directly; a made-up one where d has none). What the call
	// needs first (a category, a reservation) it makes before it calls
	// mark, which reads UsedDevices: what the call itself must leave as it
	// was.
	call func(t *testing.T, d Device, g int64, mark func()) error
	want error // the refusal; nil for a query that succeeds
}

// elasticCalls are the entry points of elastic memory, each queried or
// refused: for a device with reservations (vmm), and for one without,
// where every call but Reserve of a size <= 0 is refused with
// ErrNotSupported.
func elasticCalls(vmm bool) []elasticCall {
	unsupported := func(err error) error {
		if vmm {
			return err
		}
		return ErrNotSupported
	}
	calls := []elasticCall{
		{"MapGranularity", func(t *testing.T, d Device, g int64, mark func()) error {
			got, err := d.MapGranularity()
			if err == nil {
				assert.Equal(t, g, got)
			}
			return err
		}, unsupported(nil)},
		{"Reserve of 0 bytes", func(t *testing.T, d Device, g int64, mark func()) error {
			_, err := d.Reserve(0)
			return err
		}, ErrInvalidSize},
		{"Reserve of a negative size", func(t *testing.T, d Device, g int64, mark func()) error {
			_, err := d.Reserve(-g)
			return err
		}, ErrInvalidSize},
		{"Reserve of a size off the granularity", func(t *testing.T, d Device, g int64, mark func()) error {
			_, err := d.Reserve(g + 1)
			return err
		}, unsupported(ErrUnaligned)},
		{"Reserve refused by the driver", func(t *testing.T, d Device, g int64, mark func()) error {
			// More address space than a 64-bit process has (2^62 bytes).
			size := (1 << 62) / g * g
			_, err := d.Reserve(size)
			var oom *OutOfMemoryError
			if errors.As(err, &oom) {
				assert.Equal(t, size, oom.Requested, "the size asked: %v", err)
			}
			return err
		}, unsupported(errRefusedByDriver)},
		{"a return check that unmapped nothing", func(t *testing.T, d Device, g int64, mark func()) error {
			c, err := d.StartReturnCheck()
			if err != nil {
				return err
			}
			r, err := c.End()
			if err == nil {
				assert.Zero(t, r.Unmapped)
				assert.Zero(t, r.Mapped)
			}
			return err
		}, unsupported(nil)},
		{"Category.Reserve of the zero Category", func(t *testing.T, d Device, g int64, mark func()) error {
			_, err := Category{}.Reserve(g)
			return err
		}, ErrInvalidCategory},
		// A category is a setting: making it registers the device, and
		// its Reserve refused must leave that as it is.
		{"Category.Reserve of 0 bytes", func(t *testing.T, d Device, g int64, mark func()) error {
			c := elasticCategory(t, d)
			mark()
			_, err := c.Reserve(0)
			return err
		}, ErrInvalidSize},
		{"Category.Reserve of a size off the granularity", func(t *testing.T, d Device, g int64, mark func()) error {
			c := elasticCategory(t, d)
			mark()
			_, err := c.Reserve(g + 1)
			return err
		}, unsupported(ErrUnaligned)},
	}
	if vmm {
		// A reservation registers its device (it holds address space):
		// the calls refused on it, and its release, leave that as it is.
		for _, c := range []struct {
			name string
			call func(r *Reservation, g int64) error
			want error
		}{
			{"Map off the granularity", func(r *Reservation, g int64) error { return r.Map(1, g) }, ErrUnaligned},
			{"Unmap of nothing mapped", func(r *Reservation, g int64) error { return r.Unmap(0, g) }, ErrNotMapped},
			{"Release", func(r *Reservation, g int64) error { return r.Release() }, nil},
			{"Release, twice", func(r *Reservation, g int64) error { _ = r.Release(); return r.Release() }, ErrReservationReleased},
		} {
			calls = append(calls, elasticCall{"a reservation's " + c.name, func(t *testing.T, d Device, g int64, mark func()) error {
				r, err := d.Reserve(g)
				require.NoError(t, err)
				t.Cleanup(func() { _ = r.Release() })
				mark()
				return c.call(r, g)
			}, c.want})
		}
	}
	return calls
}

// errRefusedByDriver stands for the driver's (the OS's) refusal of a
// reservation, whatever its error: any error but the package's refusals of
// bad arguments.
var errRefusedByDriver = errorString("refused by the driver")

type errorString string

func (e errorString) Error() string { return string(e) }

// elasticCategory makes a category of d for a test of elastic memory.
func elasticCategory(t *testing.T, d Device) Category {
	t.Helper()
	c, err := d.Category("elastic_used")
	require.NoError(t, err)
	return c
}

// testElasticRegistersNothing runs each call of elasticCalls on d, which
// has reservations where vmm is true, in a process of its own, whose
// environment extra completes, and checks that UsedDevices is as it was
// before the call: the device is registered by none. It checks first that
// the check can see a registration: a reservation made registers d (where
// d has none, an allocation).
func testElasticRegistersNothing(t *testing.T, d Device, vmm bool, extra ...string) {
	t.Run("a reservation made, or an allocation, registers the device", func(t *testing.T) {
		if !childtest.InChild(t, elasticChild, extra...) {
			return
		}
		require.Empty(t, UsedDevices(), "a fresh process")
		g, ok := backendGranularity(t, d)
		require.Equal(t, vmm, ok, "whether %v has reservations", d)
		if !ok {
			// No reservation on d: memory allocated registers it.
			b, err := d.Alloc(1)
			require.NoError(t, err)
			assert.Equal(t, []Device{d}, UsedDevices())
			require.NoError(t, b.Free())
			return
		}
		r, err := d.Reserve(g)
		require.NoError(t, err)
		assert.Equal(t, []Device{d}, UsedDevices())
		require.NoError(t, r.Release())
		assert.Equal(t, []Device{d}, UsedDevices(), "a device used stays listed")
	})
	for _, c := range elasticCalls(vmm) {
		t.Run(c.name, func(t *testing.T) {
			if !childtest.InChild(t, elasticChild, extra...) {
				return
			}
			require.Empty(t, UsedDevices(), "a fresh process")
			g, ok := backendGranularity(t, d)
			require.Equal(t, vmm, ok, "whether %v has reservations", d)
			if !ok {
				g = 2 << 20
			}
			var before []Device
			mark := func() { before = UsedDevices() }
			err := c.call(t, d, g, mark)
			switch c.want {
			case nil:
				assert.NoError(t, err)
			case errRefusedByDriver:
				require.Error(t, err)
				for _, bad := range []error{ErrInvalidSize, ErrUnaligned, ErrInvalidDevice, ErrInvalidOrdinal, ErrNotSupported} {
					assert.NotErrorIs(t, err, bad)
				}
				t.Logf("the driver's refusal: %v", err)
			default:
				assert.ErrorIs(t, err, c.want)
			}
			assert.Equal(t, before, UsedDevices(), "%s registered a device", c.name)
		})
	}
}

// backendGranularity returns the granularity of d's reservations as its
// backend gives it, asked directly, which registers nothing; ok is false
// where d has none. It starts d's backend, which registers nothing either,
// and skips the test where d is not on this machine.
func backendGranularity(t *testing.T, d Device) (g int64, ok bool) {
	t.Helper()
	s := openTable(d.kind)
	if s.err != nil || d.ordinal >= s.n {
		t.Skipf("%v is not on this machine (%d device(s)): %v", d, s.n, s.err)
	}
	if s.vmm == nil {
		return 0, false
	}
	g, err := s.vmm.vmmGranularity(d.ordinal)
	if err != nil {
		require.ErrorIs(t, err, ErrNotSupported)
		return 0, false
	}
	return g, true
}

// TestElasticRegistersNothingCPU: on the CPU, every query of elastic
// memory and every call of it refused leaves UsedDevices as it was; a
// reservation made registers the CPU.
func TestElasticRegistersNothingCPU(t *testing.T) {
	testElasticRegistersNothing(t, CPU(), hostvm.Supported())
}

// TestElasticRegistersNothingInvalidDevice: the calls on a device that is
// not one register nothing either.
func TestElasticRegistersNothingInvalidDevice(t *testing.T) {
	if !childtest.InChild(t, elasticChild) {
		return
	}
	for _, d := range []Device{{}, {kind: KindCPU, ordinal: 1}} {
		_, err := d.MapGranularity()
		assert.Error(t, err, "%v", d)
		_, err = d.Reserve(4 << 10)
		assert.Error(t, err, "%v", d)
		_, err = d.StartReturnCheck()
		assert.Error(t, err, "%v", d)
	}
	assert.Empty(t, UsedDevices())
}
