// Package held keeps the device-side figure of a GPU device that allocates
// in stream order (CUDA's cuMemAllocAsync and cuMemFreeAsync, HIP's
// hipMallocAsync and hipFreeAsync): the bytes the device holds for the
// library's buffers, with its peak, in which a buffer freed in stream
// order stays until its stream has executed the free.
//
// A [Figure] counts every buffer from its allocation's return
// ([Figure.Add]); a free that returns the memory at once uncounts it at
// once ([Figure.Drop]), and a free in stream order ([Figure.Freed]) once
// the Figure has learned that its stream ran it. No event is recorded per
// free: the Figure keeps, per stream, the bytes freed since its last
// reading, and a reading asks each stream with frees pending, through a
// [Querier] that the backend's adapter implements for its driver, whether
// it has run all its work (cuStreamQuery), or whether it has reached an
// event recorded on it at an earlier reading; only where a stream is still
// busy does the reading record an event on it, after all the frees it
// counted. So a reading costs a query or two per stream with frees
// pending, and a free costs no driver call of the Figure's.
//
// Where the Figure reuses (CUDA's: the pool hands a block freed on a
// stream to the next allocation on that stream at once, the allocation
// being ordered after the free), a stream-ordered allocation takes over
// the bytes of frees pending on its stream first, the newest first, so
// that they are not counted twice ([Figure.Add], with the [Order] taken
// before the allocation was asked of the driver: only frees counted
// before it can have come before the allocation on the stream).
//
// Its invariants:
//   - a free leaves the figure only once a query showed its stream past
//     it (the stream idle, or an event recorded after the free reached),
//     or once the driver can no longer answer for it (a query that fails,
//     a device lost): nothing will run there again; so the figure is never
//     below what the device holds for the library's buffers, and equals it
//     at a reading where each stream with frees pending is idle, as after
//     the program synchronized its streams;
//   - an allocation takes over only bytes of frees of its own stream that
//     were counted before its Order, so that it never reuses a free that
//     came after it on the stream;
//   - the peak leaves out every free learned to have executed: an
//     addition that would raise it (or a peak scope's) reads first, and
//     one that stays within it does not wait;
//   - a stream keeps at most [MaxWaiting] events awaiting it; the frees of a
//     stream whose handle names another stream on each thread (the
//     per-thread default stream, not [Stream].Ordered) each come with an
//     event of their own, recorded by the adapter, and are asked about one
//     by one; once [PendingBound] of them wait, [Figure.FreedWithEvent]
//     reads itself;
//   - each reading is one call of the Querier, one reading at a time; a
//     stream's events, once reached, are kept for its next readings, and
//     destroyed with the stream's entry, which goes once the stream had
//     nothing pending at two readings in a row.
//
// Counting a free and an allocation's takeover lock the stream's entry
// alone; finding the entry is lock-free.
package held
