"""How much graph memory the allocations a launch leaves live pin.

Each row captures on stream S, in relaxed mode, a graph of allocations and
frees (each allocation a number of MiB; those the graph does not free
outlive its launch), launches it on S and reads the reserved graph memory;
then captures, launches and reads a later graph of one allocation it frees,
on the same stream; then frees the live allocations on S, destroys both
graph execs and trims. It prints the reserved graph memory (MiB) after the
first launch and after the later one.

An NVIDIA H200 (driver 580.159.04, CUDA 13.0), after the later graph: 96,
64, 64, 96, 96, 96, 96 and 128 MiB for the rows in order: an allocation
left live pins every 32 MiB chunk it lies in, the graph's allocations laid
out in capture order (testdata/fakecuda/RULES.md, the row of graphs
sharing memory).

Run it on a machine with the driver: python3 outliving-pins.py
(libcuda.so.1 found by the dynamic loader; LD_LIBRARY_PATH=.cache/fakecuda
for the fake driver).
"""

from driver import RELAXED, MiB, call, graph_reserved_mib, handle, new_stream, ref, setup, size_t, u64

dev, ctx = setup()
S = new_stream()


def graph(ops):
    """Captures on S a graph of ops, each ("a", name, MiB) an allocation or
    ("f", name) the free of one, and instantiates it; returns the graph exec
    and the allocations by name."""
    ptrs, g, exec_ = {}, handle(), handle()
    call("cuStreamBeginCapture_v2", S, RELAXED)
    for op in ops:
        if op[0] == "a":
            p = u64()
            call("cuMemAllocAsync", ref(p), size_t(op[2] * MiB), S)
            ptrs[op[1]] = p
        else:
            call("cuMemFreeAsync", ptrs[op[1]], S)
    call("cuStreamEndCapture", S, ref(g))
    call("cuGraphInstantiateWithFlags", ref(exec_), g, u64(0))
    return exec_, ptrs


def row(name, ops, live, later):
    """Launches the graph of ops, then a graph of one allocation of later
    MiB, on S; prints the reserved graph memory after each."""
    call("cuDeviceGraphMemTrim", dev)
    first, ptrs = graph(ops)
    call("cuGraphLaunch", first, S)
    call("cuStreamSynchronize", S)
    after_first = graph_reserved_mib(dev)
    second, _ = graph([("a", "z", later), ("f", "z")])
    call("cuGraphLaunch", second, S)
    call("cuStreamSynchronize", S)
    after_later = graph_reserved_mib(dev)
    for k in live:
        call("cuMemFreeAsync", ptrs[k], S)
    call("cuStreamSynchronize", S)
    call("cuGraphExecDestroy", first)
    call("cuGraphExecDestroy", second)
    call("cuDeviceGraphMemTrim", dev)
    print(f"  {name:<26} after its launch {after_first} MiB, then a {later} MiB graph: {after_later} MiB")


print("== graph memory reserved (MiB) where a launch leaves allocations live")
row("30 freed, 8 live", [("a", "A", 30), ("a", "B", 8), ("f", "A")], "B", 20)
row("8 live, 30 freed", [("a", "B", 8), ("a", "A", 30), ("f", "A")], "B", 20)
row("40 freed, 8 live", [("a", "A", 40), ("a", "B", 8), ("f", "A")], "B", 20)
row("28 freed, 8 live", [("a", "A", 28), ("a", "B", 8), ("f", "A")], "B", 28)
row("30 freed, 3 live", [("a", "A", 30), ("a", "B", 3), ("f", "A")], "B", 31)
row("8 live, 30 freed, 8 live", [("a", "B", 8), ("a", "A", 30), ("a", "C", 8), ("f", "A")], "BC", 20)
row("20 live, 20 live", [("a", "B", 20), ("a", "C", 20)], "BC", 20)
row("60 freed, 8 live", [("a", "A", 60), ("a", "B", 8), ("f", "A")], "B", 60)
