// Package held keeps the device-side figure of a GPU device that allocates
// in stream order (CUDA's cuMemAllocAsync and cuMemFreeAsync, HIP's
// hipMallocAsync and hipFreeAsync): the bytes the device holds for the
// library's buffers, with its exact peak, in which a buffer freed in
// stream order stays until its stream has executed the free.
//
// A [Figure] counts every buffer from its allocation's return
// ([Figure.Add]); a free that returns the memory at once uncounts it at
// once ([Figure.Drop]), and a free in stream order ([Figure.Freed]) once
// its stream has reached the event the adapter recorded after it, in the
// same call as the free. The Figure learns that from the driver through a
// [Querier], which the backend's adapter implements for its driver and
// binds to the device: one call asks every stream with frees pending how
// far it has come through their events. The driver is never asked about a
// stream of the program's at a reading: only about the Figure's events.
//
// Where the Figure reuses (CUDA's: the pool hands a block freed on a
// stream to the next allocation on that stream at once, the allocation
// being ordered after the free there), a stream-ordered allocation takes
// over the bytes of the frees pending on its stream first, the newest
// first, so that they are not counted twice ([Figure.Add], with the
// [Order] taken before the allocation was asked of the driver: only frees
// counted before it can have come before the allocation on the stream).
//
// Its invariants:
//   - a free leaves the figure only once its stream has reached its event,
//     or once the driver can no longer answer for it (a query that fails, a
//     device lost): nothing will run there again; so the figure is never
//     below what the device holds for the library's buffers, and a reading
//     finds every free executed that its stream has run;
//   - an allocation takes over only bytes of frees of its own stream that
//     were counted before its Order, so that it never reuses a free that
//     came after it on the stream;
//   - an event captures all the work enqueued on its stream before it, so
//     the frees pending are kept per stream in the stream's order, and one
//     event reached retires every older free of its stream; the per-stream
//     order is the order of the events' numbers ([Free].Seq), whichever
//     goroutines recorded them, and the frees of a stream that is not
//     [Stream].Ordered are asked about one by one;
//   - the peak leaves out every free known to have executed: an addition
//     that would raise it (or a peak scope's) learns of executed frees
//     first, and one that stays within it does not wait;
//   - frees pending stay bounded where nothing reads the figure:
//     [Figure.Freed] learns of executed frees itself once [PendingBound]
//     wait, then at twice what its last reading left;
//   - each reading is one call of the Querier, one reading at a time, and
//     events are reused: an event of the device's own context, once
//     reached, is kept for another free to record again
//     ([Figure.TakeSpare]); one of another context is destroyed.
//
// Counting a free and an allocation's takeover lock the stream's entry
// alone; finding the entry is lock-free.
package held
