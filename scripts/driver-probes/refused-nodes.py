"""Whether a node the driver refuses leaves a relaxed capture as it was.

Each case begins a capture of stream S in relaxed mode, adds an
allocation node of 4 KiB, then one node the driver refuses: an allocation
node of 0 bytes; a free node of a pool allocation made on another stream
O before the capture; a second free node of the capture's allocation; a
free node of an address no allocation returned. It prints the refused
call's result, S's capture info just after it (result, status 1 active or
2 invalidated, ID), a later allocation node's result, the end's result,
and whether the end gave a graph.

An NVIDIA H200 (driver 580.159.04, CUDA 13.0), every case: the node 1
(CUDA_ERROR_INVALID_VALUE), the capture active with its ID, the later node
0, the end 0 with a graph (testdata/fakecuda/RULES.md, the row of refused
free nodes).

Run it on a machine with the driver: python3 refused-nodes.py
(libcuda.so.1 found by the dynamic loader; LD_LIBRARY_PATH=.cache/fakecuda
for the fake driver).
"""

from driver import RELAXED, call, capture_info, handle, new_stream, ref, setup, size_t, u64

dev, ctx = setup()
S, O = new_stream(), new_stream()

CASES = [
    "a zero-size allocation node",
    "a free node of a pool allocation",
    "a second free node of one allocation",
    "a free node of an address of nothing",
]

print("== refused nodes in a relaxed capture: does the capture survive?")
for k, case in enumerate(CASES):
    ptr, later, pooled, graph = u64(), u64(), u64(), handle()
    if k == 1:
        call("cuMemAllocAsync", ref(pooled), size_t(4096), O)
        call("cuStreamSynchronize", O)
    call("cuStreamBeginCapture_v2", S, RELAXED)
    call("cuMemAllocAsync", ref(ptr), size_t(4096), S)
    if k == 0:
        refused = call("cuMemAllocAsync", ref(later), size_t(0), S)
    elif k == 1:
        refused = call("cuMemFreeAsync", pooled, S)
    elif k == 2:
        call("cuMemFreeAsync", ptr, S)
        refused = call("cuMemFreeAsync", ptr, S)
    else:
        refused = call("cuMemFreeAsync", u64(0x1234000), S)
    r, status, capture_id = capture_info(S)
    node = call("cuMemAllocAsync", ref(later), size_t(4096), S)
    end = call("cuStreamEndCapture", S, ref(graph))
    made = "yes" if graph.value is not None else "no"
    print(f"  {case:<40} node={refused} then capture info={r} status={status} id={capture_id}, "
          f"a later node={node}, end={end} graph={made}")
    if k == 1:
        call("cuMemFreeAsync", pooled, O)
        call("cuStreamSynchronize", O)
