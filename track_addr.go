package memtrack

// UntrackAddr frees the memory tracked at address ptr on a device of kind
// k with free, the caller's own release through the binding that allocated
// it, and then uncounts it, as [Tracked.FreeWith] does for the handle that
// [Kind.TrackedAt] would return. It reports whether a live count was there: if
// not, it calls nothing and returns false and nil. If free fails, the
// memory stays counted and tracked, and free's error is returned. While
// free runs, the address is not tracked, as with FreeWith. free == nil
// uncounts without freeing, as [Tracked.Release] does. It starts no
// backend.
//
// UntrackAddr and [Kind.TrackedAt] are methods of the Kind, not of a
// Device, because an address is unique among the devices of a kind (CUDA's
// unified addressing) and a binding that frees by address is not told the
// device: cuMemFree takes only the pointer.
func (k Kind) UntrackAddr(ptr uintptr, free func() error) (tracked bool, err error) {
	s := tableOf(k)
	if s == nil || ptr == 0 {
		return false, nil
	}
	sh := s.addrs.Shard(ptr)
	sh.Lock()
	i, ok := sh.Lookup(ptr)
	if !ok {
		sh.Unlock()
		return false, nil
	}
	e := *sh.At(i)
	if e.h != nil {
		sh.Unlock()
		// A handle is indexed: release through it. If it is not live, a
		// concurrent release was first.
		live, err := e.h.release(free)
		if !live {
			return false, nil
		}
		return true, err
	}
	// The claim of a count without a handle: it leaves the index.
	sh.DeleteAt(i)
	sh.Unlock()
	how := releaseOnly
	if free != nil {
		how = freeWith
		if err := free(); err != nil {
			sh.Lock()
			if i, ok := sh.Lookup(ptr); !ok { // not tracked anew meanwhile
				sh.InsertAt(i, ptr, e)
			}
			sh.Unlock()
			return true, err
		}
	}
	a := allocation{size: e.size, site: e.site, ordinal: e.ordinal, kind: k, from: fromAddress}
	a.mem.ptr = ptr
	// Cannot fail: the count's bytes are part of what the record holds.
	_, _ = s.release(&a, e.rec, how, DefaultStream, 0)
	return true, nil
}

// TrackedAt returns the live handle that [Device.Track] counts at address
// ptr on a device of kind k, or nil if there is none. It is the lookup of a
// drop-in binding that is given only an address to free (see package
// github.com/memtrack/memtrack/cu). It starts no backend.
func (k Kind) TrackedAt(ptr uintptr) *Tracked {
	s := tableOf(k)
	if s == nil || ptr == 0 {
		return nil
	}
	sh := s.addrs.Shard(ptr)
	sh.Lock()
	var h *Tracked
	if i, ok := sh.Lookup(ptr); ok {
		e := sh.At(i)
		if e.h == nil {
			// Counted by TrackAddr: a handle takes the count over.
			e.h = &Tracked{rec: e.rec}
			e.h.size, e.h.mem.ptr, e.h.site, e.h.ordinal, e.h.kind, e.h.from = e.size, ptr, e.site, e.ordinal, k, fromAddress
		}
		h = e.h
	}
	sh.Unlock()
	if h == nil || h.loadState() != stateLive {
		return nil
	}
	return h
}
