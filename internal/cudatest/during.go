//go:build cuda

package cudatest

// A program's capture in global mode, during which a test makes a call:
// what a serving engine does when it captures its decode step into a CUDA
// graph while a metrics endpoint is scraped on another goroutine.

/*
#include <stdint.h>

#include "calls.h"

static void cudatest_nothing(void *unused) {}

// cudatest_host_node enqueues on stream a host function that does
// nothing: on a capturing stream, a host node of the graph, which any
// driver of CUDA 10.0 or later captures.
static CUresult cudatest_host_node(uintptr_t stream) {
	return CUDATEST_CALL(cudatest_cu.cuLaunchHostFunc, (CUstream)stream, cudatest_nothing, NULL);
}
*/
import "C"

import (
	"runtime"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
)

// Where says on which thread DuringCapture runs its call.
type Where int

// The threads of DuringCapture.
const (
	// OtherThread is a thread of its own, locked to the goroutine that
	// makes the call.
	OtherThread Where = iota
	// CapturingThread is the thread that began the capture.
	CapturingThread
)

// String names the thread as a subtest's name.
func (w Where) String() string {
	if w == CapturingThread {
		return "capturing thread"
	}
	return "another thread"
}

// Threads are both threads, for a table's loop.
var Threads = []Where{OtherThread, CapturingThread}

// DuringCapture runs f while a stream of device ordinal's primary context
// captures a graph in global mode (cuStreamBeginCapture's default, and
// PyTorch's), as a program does: the capture begins on a locked thread,
// gets a node (a host function that does nothing, which no driver of
// CUDA 10.0 or later refuses), and ends once f has returned. f runs on
// the capturing thread itself, or on another locked thread, as where
// says. It returns what ending the capture answered
// (cuStreamEndCapture: Success where the capture ended with its graph,
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED where a call of f invalidated it)
// and the nodes of the graph it ended with. tb fails where the capture
// cannot be begun.
func DuringCapture(tb testing.TB, ordinal int, where Where, f func()) (nodes int, ended cudadrv.Result) {
	tb.Helper()
	if err := Load(); err != nil {
		tb.Fatalf("loading the driver's calls: %v", err)
	}
	ctx, r := cudadrv.Retain(ordinal)
	if r != cudadrv.Success {
		tb.Fatalf("retaining the primary context of device %d: CUresult %d", ordinal, r)
	}
	s := NewStream(tb, uintptr(ctx))
	if r := InContext(uintptr(ctx), func() {
		if r := BeginCapture(s, CaptureGlobal); r != cudadrv.Success {
			tb.Fatalf("cuStreamBeginCapture: CUresult %d", r)
		}
		if r := cudadrv.Result(C.cudatest_host_node(C.uintptr_t(s))); r != cudadrv.Success {
			EndCapture(s)
			tb.Fatalf("cuLaunchHostFunc in the capture: CUresult %d", r)
		}
		if where == CapturingThread {
			f()
		} else {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // surely a thread other than the capture's
				defer runtime.UnlockOSThread()
				f()
			}()
			<-done
		}
		nodes, ended = EndCapture(s)
	}); r != cudadrv.Success {
		tb.Fatalf("making the primary context current: CUresult %d", r)
	}
	return nodes, ended
}
