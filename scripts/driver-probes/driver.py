"""The CUDA driver (libcuda.so.1) through Python's ctypes, for the probes
of this folder: each probe calls the driver's C functions by name, as a C
program would, and prints what each call returned.

A call returns its CUresult: 0 is CUDA_SUCCESS, 1 CUDA_ERROR_INVALID_VALUE,
801 CUDA_ERROR_NOT_SUPPORTED, 900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (a
call a capture under way prohibits), 901 CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
The library is found as the dynamic loader finds it (LD_LIBRARY_PATH, then
the system's library path): a GPU's driver, or testdata/fakecuda built
into .cache/fakecuda.
"""

import ctypes

lib = ctypes.CDLL("libcuda.so.1")

handle = ctypes.c_void_p  # a context, stream, graph or graph exec
c_int = ctypes.c_int      # a device, a capture status
u64 = ctypes.c_uint64     # a device pointer, a capture ID, a graph memory figure
size_t = ctypes.c_size_t
ref = ctypes.byref

MiB = 1 << 20

# CUstreamCaptureMode
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2
MODE_NAMES = {GLOBAL: "global", THREAD_LOCAL: "thread-local", RELAXED: "relaxed"}

# CUgraphMem_attribute
USED_CURRENT, USED_HIGH, RESERVED_CURRENT, RESERVED_HIGH = 0, 1, 2, 3

STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING


def call(name, *args):
    """Calls the driver function name with args; returns its CUresult."""
    return getattr(lib, name)(*args)


def setup():
    """Initialises the driver, retains device 0's primary context and makes
    it current on this thread; returns the device and the context."""
    call("cuInit", 0)
    dev = c_int()
    call("cuDeviceGet", ref(dev), 0)
    ctx = handle()
    call("cuDevicePrimaryCtxRetain", ref(ctx), dev)
    call("cuCtxSetCurrent", ctx)
    return dev, ctx


def new_stream():
    """Creates a non-blocking stream in the current context."""
    s = handle()
    call("cuStreamCreate", ref(s), STREAM_NON_BLOCKING)
    return s


def capture_info(stream):
    """cuStreamGetCaptureInfo_v2 of stream: its result, the capture status
    (0 none, 1 active, 2 invalidated) and the capture's ID."""
    status = c_int()
    capture_id = u64()
    r = call("cuStreamGetCaptureInfo_v2", stream, ref(status), ref(capture_id), None, None, None)
    return r, status.value, capture_id.value


def graph_reserved_mib(dev):
    """The device's reserved graph memory (RESERVED_MEM_CURRENT), in MiB."""
    v = u64()
    call("cuDeviceGetGraphMemAttribute", dev, RESERVED_CURRENT, ref(v))
    return v.value >> 20
