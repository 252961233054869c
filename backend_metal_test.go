//go:build metal && darwin && !ios

package memtrack

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeMetal is an in-memory metalBridge: its buffers are Go memory, and it
// counts every call that Metal would see, so that tests can check what the
// backend asks of Metal and that it releases each handle exactly once.
type fakeMetal struct {
	numDevices int   // devices copyDevices offers
	maxBuffer  int64 // maxBufferLength of every device
	page       int64 // allocatedSize rounds lengths up to a multiple of it
	workingSet int64 // recommendedMaxWorkingSetSize
	extra      int64 // allocated on the device besides the buffers
	refuse     bool  // newBuffer returns no buffer
	noContents bool  // bufferContents returns nil

	mu       sync.Mutex
	next     uintptr
	bufs     map[uintptr][]byte // live buffers
	newCalls int
	released map[uintptr]int // releases of each handle
}

func newFakeMetal(numDevices int) *fakeMetal {
	return &fakeMetal{numDevices: numDevices, maxBuffer: 1 << 30, page: 16 << 10, workingSet: 8 << 30,
		next: 1 << 20, bufs: map[uintptr][]byte{}, released: map[uintptr]int{}}
}

func (f *fakeMetal) copyDevices(devs []uintptr) int {
	n := min(f.numDevices, len(devs))
	for i := range n {
		devs[i] = uintptr(i + 1) // device handles are 1..n
	}
	return n
}

func (f *fakeMetal) maxBufferLength(uintptr) int64 { return f.maxBuffer }

func (f *fakeMetal) newBuffer(dev uintptr, length int64) uintptr {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.newCalls++
	if f.refuse || dev == 0 {
		return 0
	}
	f.next++
	f.bufs[f.next] = make([]byte, (length+f.page-1)/f.page*f.page)
	return f.next
}

func (f *fakeMetal) bufferContents(buf uintptr) unsafe.Pointer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noContents {
		return nil
	}
	return unsafe.Pointer(&f.bufs[buf][0])
}

func (f *fakeMetal) bufferAllocatedSize(buf uintptr) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.bufs[buf]))
}

func (f *fakeMetal) release(obj uintptr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released[obj]++
	delete(f.bufs, obj)
}

func (f *fakeMetal) memInfo(uintptr) (workingSet, allocated int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	allocated = f.extra
	for _, b := range f.bufs {
		allocated += int64(len(b))
	}
	return f.workingSet, allocated
}

// registryID gives device handle h the registry ID 0x1000003f0 + h.
func (f *fakeMetal) registryID(dev uintptr) uint64 { return 0x1000003f0 + uint64(dev) }

func (f *fakeMetal) name(dev uintptr) string { return fmt.Sprintf("Fake Metal GPU %d", dev) }

// state returns the fake's live buffers, calls to newBuffer and releases.
func (f *fakeMetal) state() (live, newCalls int, released map[uintptr]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	released = make(map[uintptr]int, len(f.released))
	for h, n := range f.released {
		released[h] = n
	}
	return len(f.bufs), f.newCalls, released
}

func TestMetalBackendDevices(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offered int
		want    int
		wantErr error
	}{
		{"none", 0, 0, ErrBackendUnavailable},
		{"one", 1, 1, nil},
		{"three", 3, 3, nil},
		{"more than the backend takes", metalMaxDevices + 5, metalMaxDevices, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetalBackendOver(newFakeMetal(tc.offered))
			n, err := m.devices()
			assert.Equal(t, tc.want, n)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				aerr := m.alloc(0, 1, new(memory))
				assert.ErrorIs(t, aerr, tc.wantErr, "alloc on a backend without devices")
				_, _, merr := m.memInfo(0)
				assert.ErrorIs(t, merr, tc.wantErr, "memInfo on a backend without devices")
				return
			}
			require.NoError(t, err)
			for i, d := range m.devs {
				assert.Equal(t, uintptr(i+1), d.handle, "ordinal %d keeps the bridge's order", i)
			}
		})
	}
}

func TestMetalBackendAllocFree(t *testing.T) {
	for _, size := range []int64{1, 4095, 16 << 10, 16<<10 + 1, 3<<20 + 7} {
		f := newFakeMetal(2)
		m := newMetalBackendOver(f)
		var mem memory
		require.NoError(t, m.alloc(1, size, &mem), "size %d", size)
		host := mem.hostBytes(size)

		assert.NotZero(t, mem.ptr, "the buffer's handle")
		assert.Len(t, host, int(size), "the host view has the size asked for")
		assert.Equal(t, (size+f.page-1)/f.page*f.page, mem.reserved, "reserved is Metal's allocatedSize")
		f.mu.Lock()
		backing := f.bufs[mem.ptr]
		f.mu.Unlock()
		host[0] = 0xAB
		assert.Equal(t, byte(0xAB), backing[0], "the host view is the buffer's memory")
		host[size-1] = 0xCD
		assert.Equal(t, byte(0xCD), backing[size-1])

		require.NoError(t, m.free(1, size, &mem))
		live, _, released := f.state()
		assert.Zero(t, live, "no buffer left after free")
		assert.Equal(t, map[uintptr]int{mem.ptr: 1}, released, "the buffer's handle released once, and nothing else")
	}
}

func TestMetalBackendAllocErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(*fakeMetal)
		ordinal  int
		size     int64
		want     error  // the sentinel the error matches
		reason   string // a part of the OutOfMemoryError's reason
		newCalls int    // calls to newBuffer expected
		released int    // handles expected to be released
	}{
		{"past maxBufferLength", func(f *fakeMetal) { f.maxBuffer = 1 << 20 }, 0, 1<<20 + 1, ErrOutOfMemory, "maxBufferLength 1.00 MiB", 0, 0},
		{"past maxBufferLength by far", nil, 0, math.MaxInt64, ErrOutOfMemory, "maxBufferLength", 0, 0},
		{"Metal returns no buffer", func(f *fakeMetal) { f.refuse = true; f.extra = 3 << 30 }, 0, 4096, ErrOutOfMemory, "3.00 GiB allocated of a recommended working set of 8.00 GiB", 1, 0},
		{"buffer without contents", func(f *fakeMetal) { f.noContents = true }, 0, 4096, nil, "", 1, 1},
		{"ordinal past the last device", nil, 2, 4096, ErrInvalidOrdinal, "", 0, 0},
		{"negative ordinal", nil, -1, 4096, ErrInvalidOrdinal, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeMetal(2)
			if tc.setup != nil {
				tc.setup(f)
			}
			m := newMetalBackendOver(f)
			var mem memory
			err := m.alloc(tc.ordinal, tc.size, &mem)
			require.Error(t, err)
			assert.Zero(t, mem.ptr)
			assert.Nil(t, mem.host)
			var ce *callError
			switch {
			case tc.want == ErrOutOfMemory:
				require.ErrorAs(t, err, &ce, "the seam's error")
				assert.True(t, ce.oom, "out of memory")
				assert.Contains(t, ce.err.Error(), tc.reason)
				var oom *OutOfMemoryError
				require.ErrorAs(t, fillError(err, Device{kind: KindMetal}, tc.size, nil), &oom, "as the device table returns it")
				assert.Contains(t, oom.Reason, tc.reason)
			case tc.want != nil:
				assert.ErrorIs(t, err, tc.want)
			default:
				require.ErrorAs(t, err, &ce, "the seam's error")
				assert.Equal(t, "alloc", ce.op)
			}
			live, newCalls, released := f.state()
			assert.Zero(t, live, "no buffer is left behind")
			assert.Equal(t, tc.newCalls, newCalls, "calls to newBuffer")
			assert.Len(t, released, tc.released, "handles released")
			for h, n := range released {
				assert.Equal(t, 1, n, "handle %d released once", h)
			}
		})
	}
}

func TestMetalBackendFreeWithoutHandle(t *testing.T) {
	f := newFakeMetal(1)
	m := newMetalBackendOver(f)
	host := make([]byte, 8)
	mem := memory{}
	mem.setHost(host)
	err := m.free(0, 8, &mem)
	var ce *callError
	require.ErrorAs(t, err, &ce, "the seam's error")
	assert.Equal(t, "free", ce.op)
	_, _, released := f.state()
	assert.Empty(t, released, "nothing is released for memory without a handle")
}

func TestMetalBackendMemInfo(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		workingSet, allocated int64
		free, total           int64
	}{
		{"idle", 8 << 30, 0, 8 << 30, 8 << 30},
		{"in use", 8 << 30, 3 << 30, 5 << 30, 8 << 30},
		{"exactly full", 8 << 30, 8 << 30, 0, 8 << 30},
		{"past the recommended working set", 8 << 30, 9 << 30, 0, 8 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeMetal(1)
			f.workingSet, f.extra = tc.workingSet, tc.allocated
			free, total, err := newMetalBackendOver(f).memInfo(0)
			require.NoError(t, err)
			assert.Equal(t, tc.free, free)
			assert.Equal(t, tc.total, total)
		})
	}
}

// TestMetalBackendConcurrent allocates and frees from many goroutines at once
// and checks, exactly, that every buffer got its own memory and that every
// handle was released once.
func TestMetalBackendConcurrent(t *testing.T) {
	goroutines, perG := 32, 64
	if testing.Short() {
		goroutines, perG = 8, 16
	}
	f := newFakeMetal(2)
	m := newMetalBackendOver(f)
	start := make(chan struct{})
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			mems := make([]memory, 0, perG)
			for i := range perG {
				var mem memory
				if err := m.alloc(g%2, int64(1+i), &mem); err != nil {
					errs <- err
					return
				}
				mem.hostBytes(1)[0] = byte(g)
				mems = append(mems, mem)
			}
			for i, mem := range mems {
				if mem.hostBytes(1)[0] != byte(g) {
					errs <- errors.New("a buffer's memory was shared with another goroutine's")
					return
				}
				if err := m.free(g%2, int64(1+i), &mem); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	live, newCalls, released := f.state()
	assert.Zero(t, live, "every buffer freed")
	assert.Equal(t, goroutines*perG, newCalls)
	assert.Len(t, released, goroutines*perG, "every handle released")
	for h, n := range released {
		require.Equal(t, 1, n, "handle %d released once", h)
	}
}

func TestMetalInt64Of(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want int64
	}{
		{0, 0},
		{4096, 4096},
		{math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 + 1, math.MaxInt64},
		{math.MaxUint64, math.MaxInt64},
	} {
		assert.Equal(t, tc.want, int64Of(tc.in), "int64Of(%d)", tc.in)
	}
}

// TestMetalBackendInfo names each Metal device through Device.Info, over the fake
// bridge: device handle h (ordinal h-1) has the registry ID 0x1000003f0+h.
func TestMetalBackendInfo(t *testing.T) {
	useBackend(t, KindMetal, newMetalBackendOver(newFakeMetal(2)))
	for _, want := range []DeviceInfo{
		{Device: Device{kind: KindMetal, ordinal: 0}, Name: "Fake Metal GPU 1", UUID: "0x1000003f1"},
		{Device: Device{kind: KindMetal, ordinal: 1}, Name: "Fake Metal GPU 2", UUID: "0x1000003f2"},
	} {
		got, err := want.Device.Info()
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := Device{kind: KindMetal, ordinal: 2}.Info()
	assert.ErrorIs(t, err, ErrInvalidOrdinal)
}

// TestMetalBackendInfoNoDevice: a backend without devices names none.
func TestMetalBackendInfoNoDevice(t *testing.T) {
	m := newMetalBackendOver(newFakeMetal(0))
	_, _, err := m.info(0)
	assert.ErrorIs(t, err, ErrBackendUnavailable)
}
