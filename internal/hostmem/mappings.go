package hostmem

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"
)

// Mappings is a set of live mappings, made with [Mappings.Map] or made
// elsewhere and added with [Mappings.Add] (the pages of a reservation
// committed), whose bytes that are not resident [Mappings.NotResident]
// reads: anonymous memory is resident only from its first write, so that a
// process's resident set leaves out what its owner mapped and has not
// written yet. The zero Mappings is empty and ready to use; it is safe for
// concurrent use.
//
// Map and Unmap add one map insertion or deletion under a mutex to the
// system call they make, and read nothing, as Add and Remove do;
// NotResident reads the residency of every live mapping (mincore(2) on
// Linux), holding the mutex, so that no mapping is unmapped while it is
// read.
type Mappings struct {
	mu   sync.Mutex
	live map[uintptr]int // the mappings' first bytes and lengths
	vec  []byte          // NotResident's buffer for the kernel's answer, kept for the next call
}

// Map maps size bytes as [Map] does, and adds the mapping to the set.
func (ms *Mappings) Map(size int64) ([]byte, error) {
	b, err := Map(size)
	if err != nil || len(b) == 0 {
		return b, err
	}
	ms.add(b)
	return b, nil
}

// Unmap takes b, a mapping of Map, out of the set, and returns it to the
// OS as [Unmap] does. Where that fails, b stays mapped and in the set.
func (ms *Mappings) Unmap(b []byte) error {
	if len(b) == 0 {
		return Unmap(b)
	}
	ms.mu.Lock()
	delete(ms.live, addr(b))
	ms.mu.Unlock()
	if err := Unmap(b); err != nil {
		ms.add(b)
		return err
	}
	return nil
}

// Add adds b, anonymous memory that its caller mapped (pages of a
// reservation, committed), to the set, so that NotResident reads it until
// Remove takes it out. b stays mapped while it is in the set: the caller
// removes it before it unmaps it.
func (ms *Mappings) Add(b []byte) {
	if len(b) > 0 {
		ms.add(b)
	}
}

// Remove takes b, which Add added, out of the set, and unmaps nothing.
func (ms *Mappings) Remove(b []byte) {
	if len(b) == 0 {
		return
	}
	ms.mu.Lock()
	delete(ms.live, addr(b))
	ms.mu.Unlock()
}

func (ms *Mappings) add(b []byte) {
	ms.mu.Lock()
	if ms.live == nil {
		ms.live = make(map[uintptr]int)
	}
	ms.live[addr(b)] = len(b)
	ms.mu.Unlock()
}

// NotResident returns the bytes of the live mappings that are not resident
// (pages never written, or swapped out), counting a mapping's last page
// only for the bytes of the mapping in it. It is 0 where the OS cannot
// tell (only Linux is asked).
func (ms *Mappings) NotResident() (int64, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var n int64
	for a, size := range ms.live {
		m, err := notResident(a, size, &ms.vec)
		if err != nil {
			return 0, err
		}
		n += m
	}
	return n, nil
}

// ErrNoResidency: this OS does not say which pages are resident (only
// Linux is asked, with mincore(2)).
var ErrNoResidency = errors.New("which pages are resident is not read on " + runtime.GOOS)

// Resident returns the bytes of b, whole pages of a mapping, that are
// resident, as mincore(2) reports them: a page of anonymous memory is
// resident from its first write until it goes back to the OS (or to
// swap). It fails with ErrNoResidency where the OS is not asked.
func Resident(b []byte) (int64, error) {
	if !residencyKnown {
		return 0, ErrNoResidency
	}
	if len(b) == 0 {
		return 0, nil
	}
	var vec []byte
	n, err := notResident(addr(b), len(b), &vec)
	if err != nil {
		return 0, err
	}
	return int64(len(b)) - n, nil
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
