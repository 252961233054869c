// Package captures keeps what memtrack counted of the CUDA graph captures
// of one device: the allocation and free nodes that its stream-ordered
// calls added to each capture's graph, what each launch of the graph then
// needs, and what its allocations leave live after a launch.
//
// Its invariants:
//   - A capture's PeakBytes is the peak, in the order its nodes were added,
//     of the bytes of its own allocations live at once, as they asked for
//     them; its OutlivingBytes, the bytes of them that no free node of its
//     own frees. Neither ever goes below 0. The caller rounds them up to
//     the chunk in which the driver reserves graph memory (RoundUp): the
//     set keeps bytes, so that a chunk learned late rounds every capture
//     kept.
//   - A stream takes part in one capture at a time, and leaves it only
//     when the capture ends: a node seen on a stream in another capture
//     ends the stream's last one, and so does a reading of the stream that
//     finds it not capturing (OnStream). The set learns of an end from its
//     caller alone: List asks nothing of the streams, whose handles are the
//     program's, and reports each capture as the set last saw it.
//   - What the driver reports of a stream whose capture it invalidated
//     (no ID) changes no record: only a node that the driver refused in a
//     capture it names by ID marks that capture invalidated.
//   - The set's Outliving for a chunk is the sum of what its captures'
//     outliving allocations may pin (Pinned), less those known
//     invalidated, whose graphs never launch; the captures forgotten past
//     its bound count their bytes in whole chunks and two chunks an
//     allocation, at least what Pinned gives.
//   - At most max captures that ended are kept, the most recent; those in
//     progress are all kept.
//
// A Set is safe for concurrent use, under one lock: a capture is the
// setting up of a program's steps, not their allocation path.
package captures
