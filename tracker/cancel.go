package tracker

// Cancel takes back an [Record.Alloc] of n bytes that succeeded, for an
// allocation that something after the record then refused (a second record
// that counts the same memory, such as a device's beside a category's). The
// bytes held and the live buffers go back down as for a Free, but the
// cumulative figures keep neither the allocation nor a free: Allocs,
// AllocBytes, Frees and FreedBytes are as if the Alloc had never been
// made, and FailedAllocs counts one more. It fails, changing nothing, as
// [Record.Free] does: with [ErrInvalidSize] if n <= 0 and with
// [ErrFreeExceedsTracked] if n is more than is held or no buffer is live.
//
// The peaks are not lowered: an Alloc is seen by readers from its return,
// so a peak it raised was a figure the record held. A caller that wants no
// trace of a refused allocation checks, before the Alloc, what can refuse
// it after.
//
// Cancel takes the exact path of a Free (a compare-and-swap on a consistent
// state) and moves the counts word as a Free does, so that readers see it
// as one operation; the cancelled figures sit beside the freed bytes, where
// readers load them.
func (r *Record) Cancel(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	return r.freeExact(n, true)
}
