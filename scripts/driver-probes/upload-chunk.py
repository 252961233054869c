"""What the driver reserves for a graph of one 1-byte allocation, uploaded.

On a device whose graph memory is trimmed, it captures on stream S, in
relaxed mode, a graph of one allocation node of 1 byte and its free node,
instantiates it and reads the reserved graph memory (RESERVED_MEM_CURRENT),
then uploads it (cuGraphUpload maps a graph's memory without running it),
synchronizes S and reads it again: the growth is the chunk in which the
driver reserves graph memory, which memtrack's Graphs.Chunk learns the same
way.

An NVIDIA H200 (driver 580.159.04, CUDA 13.0): 0 bytes before the upload,
32 MiB after (docs/graphs.md, "The graph chunk").

Run it on a machine with the driver: python3 upload-chunk.py
(libcuda.so.1 found by the dynamic loader; LD_LIBRARY_PATH=.cache/fakecuda
for the fake driver).
"""

from driver import RELAXED, RESERVED_CURRENT, call, handle, new_stream, ref, setup, size_t, u64

dev, ctx = setup()
S = new_stream()

call("cuDeviceGraphMemTrim", dev)
ptr, graph, exec_, before, after = u64(), handle(), handle(), u64(), u64()
call("cuStreamBeginCapture_v2", S, RELAXED)
call("cuMemAllocAsync", ref(ptr), size_t(1), S)
call("cuMemFreeAsync", ptr, S)
call("cuStreamEndCapture", S, ref(graph))
call("cuGraphInstantiateWithFlags", ref(exec_), graph, u64(0))
call("cuDeviceGetGraphMemAttribute", dev, RESERVED_CURRENT, ref(before))
upload = call("cuGraphUpload", exec_, S)
sync = call("cuStreamSynchronize", S)
call("cuDeviceGetGraphMemAttribute", dev, RESERVED_CURRENT, ref(after))
print("== a graph of one 1-byte allocation and its free, uploaded")
print(f"  cuGraphUpload={upload} cuStreamSynchronize={sync}")
print(f"  reserved graph memory: {before.value} bytes instantiated, {after.value} bytes uploaded")
