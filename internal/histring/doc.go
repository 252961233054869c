// Package histring is the ring of package memtrack's memory history: one
// device's events (allocations, frees, refusals), written without a lock
// and without waiting, read back in order with the events a reader could
// not read reported as gaps.
//
// Writers take a ticket, the event's number, with one atomic add, and own
// the slot of that number while they write it; a writer that finds its
// slot held (by a reader, or by a lapped writer still writing), or holding
// a newer event, drops its event and counts it lost. Readers take turns,
// and claim each slot the same way while they copy it. The slots hold no
// pointer, so that the garbage collector need not scan a ring of millions
// of events; the events' sites, of the caller's type S, are kept beside
// them, in an array made on the first event that has one.
package histring
