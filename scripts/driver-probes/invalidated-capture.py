"""What the driver answers about a stream whose capture is invalidated.

For a capture of stream S begun in relaxed mode, then in global mode: an
allocation node (cuMemAllocAsync on S), then cuStreamQuery of S, which a
capture does not permit and which invalidates it; then, on the capturing
thread and on another, the calls memtrack makes of a stream (the current
context, the context of S and of another stream O, cuMemGetInfo, S's
capture info and capture status); then a second allocation node, the end
of the capture, and the same calls once it ended.

An NVIDIA H200 (driver 580.159.04, CUDA 13.0), in both modes: the query 900;
on either thread cuStreamGetCtx(S) 901, cuCtxGetCurrent, cuStreamGetCtx(O)
and cuMemGetInfo 0, cuStreamGetCaptureInfo_v2(S) and cuStreamIsCapturing(S)
0 with the status 2 (invalidated) and no ID; the second node 901, the end
901 with no graph; after the end, all 0, status 0
(testdata/fakecuda/RULES.md, the row of invalidation).

Run it on a machine with the driver: python3 invalidated-capture.py
(libcuda.so.1 found by the dynamic loader; LD_LIBRARY_PATH=.cache/fakecuda
for the fake driver).
"""

import threading

from driver import MODE_NAMES, RELAXED, GLOBAL, call, capture_info, handle, new_stream, ref, setup, size_t, u64, c_int

dev, ctx = setup()
S, O = new_stream(), new_stream()


def stream_calls(where):
    """Prints the calls memtrack makes of a stream, made on this thread."""
    current = handle()
    free, total = size_t(), size_t()
    status = c_int()
    results = [
        ("cuCtxGetCurrent", call("cuCtxGetCurrent", ref(current))),
        ("cuStreamGetCtx(S)", call("cuStreamGetCtx", S, ref(current))),
        ("cuStreamGetCtx(O)", call("cuStreamGetCtx", O, ref(current))),
        ("cuMemGetInfo", call("cuMemGetInfo_v2", ref(free), ref(total))),
    ]
    r, st, capture_id = capture_info(S)
    line = " ".join(f"{name}={r}" for name, r in results)
    line += f" cuStreamGetCaptureInfo(S)={r} status={st} id={capture_id}"
    line += f" cuStreamIsCapturing(S)={call('cuStreamIsCapturing', S, ref(status))} status={status.value}"
    print(f"  {where:<14} {line}")


def on_other_thread(where):
    """Runs stream_calls on a thread of its own, in the same context."""
    def run():
        call("cuCtxSetCurrent", ctx)
        stream_calls(where)
    t = threading.Thread(target=run)
    t.start()
    t.join()


for mode in (RELAXED, GLOBAL):
    ptr, graph = u64(), handle()
    print(f"== capture of S in {MODE_NAMES[mode]} mode, invalidated by cuStreamQuery(S) on its thread")
    print(f"  begin={call('cuStreamBeginCapture_v2', S, mode)}")
    print(f"  alloc node={call('cuMemAllocAsync', ref(ptr), size_t(4096), S)}")
    print(f"  cuStreamQuery(S)={call('cuStreamQuery', S)}")
    stream_calls("same thread:")
    on_other_thread("other thread:")
    print(f"  cuMemAllocAsync(S)={call('cuMemAllocAsync', ref(ptr), size_t(4096), S)}")
    print(f"  cuStreamEndCapture={call('cuStreamEndCapture', S, ref(graph))} graph={graph.value}")
    stream_calls("after the end:")
