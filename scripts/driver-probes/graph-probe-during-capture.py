"""Whether the calls of memtrack's graph-chunk probe are safe during a
program's capture, and what the probe costs.

The probe (as memtrack's Graphs.Chunk makes it) creates a stream of its
own, captures on it in relaxed mode a graph of one 1-byte allocation and
its free, ends the capture, instantiates the graph, uploads it, synchronizes
the stream, reads the reserved graph memory, destroys the graph exec, the
graph and the stream, trims the device's graph memory and resets both
high-water marks; each run prints the reserved graph memory it read (MiB)
and every call that did not return 0, by name.

It runs the probe once on a quiet device, then 50 times for its cost (µs
per probe), then while stream S of the same context captures in global
mode (an allocation node before the probe, an allocation and two free
nodes after it, then the end): on another thread and on the capturing
thread, with the probe's thread made relaxed (cuThreadExchangeStreamCaptureMode)
and in its default, global mode. After each it prints S's capture calls
that did not return 0, the graph's node count, and the device's graph
memory figures (MiB: reserved, its high, used, its high).

An NVIDIA H200 (driver 580.159.04, CUDA 13.0): the probe 32 MiB, about
162 µs; in relaxed mode every call 0 and S's capture ended with its graph,
on either thread; in global mode, from another thread,
cuGraphInstantiateWithFlags, cuStreamSynchronize of the probe's own stream
and cuGraphExecDestroy 900 and S's capture ended 901 with no graph
(testdata/fakecuda/RULES.md, "Calls unsafe during a capture" and the row
of graph calls; docs/graphs.md).

Run it on a machine with the driver: python3 graph-probe-during-capture.py
(libcuda.so.1 found by the dynamic loader; LD_LIBRARY_PATH=.cache/fakecuda
for the fake driver).
"""

import threading
import time

from driver import (GLOBAL, RELAXED, RESERVED_CURRENT, RESERVED_HIGH, STREAM_NON_BLOCKING, USED_CURRENT, USED_HIGH, MiB,
                    c_int, call, handle, new_stream, ref, setup, size_t, u64)

dev, ctx = setup()
S = new_stream()


def figures():
    """The device's graph memory figures in MiB: reserved, its high-water
    mark, used, its high-water mark."""
    out = []
    for attr in (RESERVED_CURRENT, RESERVED_HIGH, USED_CURRENT, USED_HIGH):
        v = u64()
        call("cuDeviceGetGraphMemAttribute", dev, attr, ref(v))
        out.append(v.value >> 20)
    return out


def failed(results):
    """The calls of results, (name, CUresult) pairs, that did not return 0."""
    return " ".join(f"{name}={r}" for name, r in results if r) or "none"


def probe(relaxed=True):
    """Runs the probe on this thread, made relaxed where relaxed; returns the
    reserved graph memory it read (MiB) and its calls' results."""
    mode = c_int(RELAXED)
    if relaxed:
        call("cuThreadExchangeStreamCaptureMode", ref(mode))
    s, ptr, graph, exec_, reserved, zero = handle(), u64(), handle(), handle(), u64(), u64(0)
    results = [
        ("cuStreamCreate", call("cuStreamCreate", ref(s), STREAM_NON_BLOCKING)),
        ("cuStreamBeginCapture", call("cuStreamBeginCapture_v2", s, RELAXED)),
        ("cuMemAllocAsync", call("cuMemAllocAsync", ref(ptr), size_t(1), s)),
        ("cuMemFreeAsync", call("cuMemFreeAsync", ptr, s)),
        ("cuStreamEndCapture", call("cuStreamEndCapture", s, ref(graph))),
        ("cuGraphInstantiateWithFlags", call("cuGraphInstantiateWithFlags", ref(exec_), graph, u64(0))),
        ("cuGraphUpload", call("cuGraphUpload", exec_, s)),
        ("cuStreamSynchronize", call("cuStreamSynchronize", s)),
        ("cuDeviceGetGraphMemAttribute", call("cuDeviceGetGraphMemAttribute", dev, RESERVED_CURRENT, ref(reserved))),
        ("cuGraphExecDestroy", call("cuGraphExecDestroy", exec_)),
        ("cuGraphDestroy", call("cuGraphDestroy", graph)),
        ("cuStreamDestroy", call("cuStreamDestroy_v2", s)),
        ("cuDeviceGraphMemTrim", call("cuDeviceGraphMemTrim", dev)),
        ("cuDeviceSetGraphMemAttribute(USED_HIGH)", call("cuDeviceSetGraphMemAttribute", dev, USED_HIGH, ref(zero))),
        ("cuDeviceSetGraphMemAttribute(RESERVED_HIGH)", call("cuDeviceSetGraphMemAttribute", dev, RESERVED_HIGH, ref(zero))),
    ]
    if relaxed:
        call("cuThreadExchangeStreamCaptureMode", ref(mode))
    return reserved.value >> 20, results


mib, results = probe()
print(f"== the probe on a quiet device: {mib} MiB reserved; calls failed: {failed(results)}; figures after {figures()}")

n = 50
start = time.perf_counter()
for _ in range(n):
    probe()
print(f"== {n} probes: {(time.perf_counter() - start) / n * 1e6:.0f} µs per probe; figures after {figures()}")


def during_capture(other_thread, relaxed):
    """Runs the probe while S captures in global mode, on another thread or
    on the capturing one, relaxed or in the default mode."""
    out = []

    def run():
        call("cuCtxSetCurrent", ctx)
        out.append(probe(relaxed))

    ptr, later, graph = u64(), u64(), handle()
    capture = [
        ("cuStreamBeginCapture", call("cuStreamBeginCapture_v2", S, GLOBAL)),
        ("cuMemAllocAsync", call("cuMemAllocAsync", ref(ptr), size_t(MiB), S)),
    ]
    if other_thread:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    else:
        out.append(probe(relaxed))
    capture += [
        ("cuMemAllocAsync", call("cuMemAllocAsync", ref(later), size_t(MiB), S)),
        ("cuMemFreeAsync", call("cuMemFreeAsync", later, S)),
        ("cuMemFreeAsync", call("cuMemFreeAsync", ptr, S)),
        ("cuStreamEndCapture", call("cuStreamEndCapture", S, ref(graph))),
    ]
    nodes = size_t()
    call("cuGraphGetNodes", graph, None, ref(nodes))
    mib, results = out[0]
    where = "another thread" if other_thread else "the capturing thread"
    mode = "relaxed" if relaxed else "default (global)"
    print(f"== global capture of S, the probe on {where}, {mode} mode")
    print(f"  probe: {mib} MiB reserved; calls failed: {failed(results)}")
    print(f"  capture of S: calls failed: {failed(capture)}; nodes {nodes.value}; figures after {figures()}")
    if graph.value:
        call("cuGraphDestroy", graph)


for other_thread in (True, False):
    for relaxed in (True, False):
        during_capture(other_thread, relaxed)
