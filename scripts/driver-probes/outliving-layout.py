"""Where the driver lays out a graph's allocations, as the chunks that the
allocations a launch leaves live pin show it.

Each row is a graph written as steps: "aX20" allocates 20 MiB as X, "fX"
frees X; the allocations it does not free outlive its launch. The row
captures it on stream S in relaxed mode, launches it and reads the
reserved graph memory; then captures, launches and reads a later graph
of one allocation of the row's size that it frees, on the same stream;
then frees the live allocations, destroys both graph execs and trims. It
prints the reserved graph memory (MiB) after the first launch and after
the later one. Laid out first fit in capture order, with chunks of 32 MiB,
the allocations left live pin the chunks they lie in, and the later graph
needs chunks apart from those.

memtrack does not see the layout: Capture.Outliving counts the most the
live allocations may pin wherever they lie. The H200's answers to these
rows were not kept; testdata/fakecuda/RULES.md cites those of
outliving-pins.py.

Run it on a machine with the driver: python3 outliving-layout.py
(libcuda.so.1 found by the dynamic loader; LD_LIBRARY_PATH=.cache/fakecuda
for the fake driver).
"""

from driver import RELAXED, MiB, call, graph_reserved_mib, handle, new_stream, ref, setup, size_t, u64

dev, ctx = setup()
S = new_stream()


def graph(steps):
    """Captures on S the graph of steps ("aX20", "fX") and instantiates it;
    returns the graph exec and the allocations by name."""
    ptrs, g, exec_ = {}, handle(), handle()
    call("cuStreamBeginCapture_v2", S, RELAXED)
    for step in steps.split():
        if step[0] == "a":
            p = u64()
            call("cuMemAllocAsync", ref(p), size_t(int(step[2:]) * MiB), S)
            ptrs[step[1]] = p
        else:
            call("cuMemFreeAsync", ptrs[step[1]], S)
    call("cuStreamEndCapture", S, ref(g))
    call("cuGraphInstantiateWithFlags", ref(exec_), g, u64(0))
    return exec_, ptrs


def row(steps, live, later):
    """Launches the graph of steps, then a graph of one allocation of later
    MiB, on S; prints the reserved graph memory after each."""
    call("cuDeviceGraphMemTrim", dev)
    first, ptrs = graph(steps)
    call("cuGraphLaunch", first, S)
    call("cuStreamSynchronize", S)
    after_first = graph_reserved_mib(dev)
    second, _ = graph(f"az{later} fz")
    call("cuGraphLaunch", second, S)
    call("cuStreamSynchronize", S)
    after_later = graph_reserved_mib(dev)
    for k in live:
        call("cuMemFreeAsync", ptrs[k], S)
    call("cuStreamSynchronize", S)
    call("cuGraphExecDestroy", first)
    call("cuGraphExecDestroy", second)
    call("cuDeviceGraphMemTrim", dev)
    print(f"  {steps:<30} (live {live}) after its launch {after_first} MiB, then a {later} MiB graph: {after_later} MiB")


print("== graph memory reserved (MiB) where a launch leaves allocations live, by layout")
row("aA20 aB4 fA aC16 fB", "C", 40)
row("aA20 aB4 fA aC16", "BC", 40)
row("aA24 aB16 fA aC20 fB", "C", 40)
row("aA10 aB10 aC10 fB aD10 fA fC", "D", 40)
row("aA30 fA aB8", "B", 30)
row("aA16 aB16 fA aC8 fB", "C", 40)
row("aA40 aB20 fA aC30 fB", "C", 60)
