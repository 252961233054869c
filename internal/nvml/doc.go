// Package nvml is memtrack's binding of NVIDIA's management library, NVML
// (libnvidia-ml.so.1), built with -tags cuda. It answers one question for
// memtrack's per-process figures: which processes hold device memory on a
// GPU, and how much the driver attributes to each.
//
// [Open] loads the library with dlopen and finds its calls with dlsym
// (library.c), each by the versioned name nvml.h declares: five that every
// library must have, and the newest of the three that list a device's
// processes; library.h declares the few types and values used. So nothing
// needs nvml.h to build, and a binary carries no unresolved NVML symbol:
// it starts where the library is missing, or older than these calls, even
// under immediate
// binding (LD_BIND_NOW=1, or linked with -z now), where a binding that
// leaves the symbols for lazy binding to resolve (NVIDIA's go-nvml, built
// with --unresolved-symbols=ignore-in-object-files) stops the process at
// start. Open then says why NVML is unavailable, in the dynamic loader's
// words. Nothing here runs on memtrack's allocation path: memtrack reads
// NVML only where it reads the driver's figures (Usage, Baseline, Measure,
// the out-of-memory report).
//
// # The NVML rules it relies on
//
// Each rule is NVML's documented behaviour, with the page of the NVML API
// Reference Guide (docs.nvidia.com/deploy/nvml-api) that states it, in the
// words of nvml.h as github.com/NVIDIA/go-nvml v0.13.4-1 ships it
// (gen/nvml/nvml.h). The fake NVML of testdata/fakenvml follows the same
// rules (its RULES.md), and the tests of this package check them against
// it, the errors by its fault injection, each in a process of its own.
//
//   - Initialisation. nvmlInit_v2 must come "before calling any other
//     methods", and "a reference count of the number of initializations is
//     maintained"; nvmlShutdown undoes one (Initialization and Cleanup).
//     [Open] loads the library once per process, then initialises it; a
//     [Lib] initialises once and shuts down once ([Lib.Close]).
//
//   - Devices by UUID. nvmlDeviceGetHandleByUUID takes "the UUID of the
//     target GPU or MIG instance" and returns "the device handle or MIG
//     device handle"; NVML's indices are its own, and CUDA_VISIBLE_DEVICES
//     renumbers CUDA's ordinals only, so memtrack passes the UUID the CUDA
//     driver gives (cuDeviceGetUuid_v2), never an ordinal.
//
//   - Compute processes. nvmlDeviceGetComputeRunningProcesses_v3 "returns
//     information only about compute running processes (e.g. CUDA
//     application which have active context)"; graphics applications are
//     not listed, and neither is a process before it has a context. The
//     list "is dynamic and the number of elements might change in time":
//     [Lib.Processes] asks its length ("call this function with *infoCount
//     = 0"), then reads it, again with a larger array while the library
//     answers NVML_ERROR_INSUFFICIENT_SIZE, at every call.
//
//   - Three calls list them, each filling the entry of the nvml.h that
//     introduced it, and the driver's library exports those of its branch
//     (the NO_UNVERSIONED_FUNC_DEFS section of nvml.h declares all three):
//     the unversioned nvmlDeviceGetComputeRunningProcesses fills
//     nvmlProcessInfo_v1_t (pid, usedGpuMemory: 16 bytes), "legacy
//     version for older versions of the API", so named from NVML 11.4's
//     header; _v2, in NVML 11.1's header already, fills the four fields
//     pid, usedGpuMemory, gpuInstanceId, computeInstanceId (24 bytes),
//     nvmlProcessInfo_t until NVML 11.6's header named it
//     nvmlProcessInfo_v2_t; _v3, from NVML 11.6, fills nvmlProcessInfo_t,
//     the same four fields (the headers of github.com/NVIDIA/go-nvml
//     v0.11.1-0, v0.11.4-0 and v0.11.6-0). [Open] takes the newest the
//     library has, as NVIDIA's go-nvml binding does: a library of the 470
//     branch (CUDA 11.4) has the unversioned call and _v2, one of 535 all
//     three. A library without any is unavailable, naming the three.
//
//   - Memory per process. "The usedGpuMemory field returned is all of the
//     memory used by the application", its context included; "under WDDM,
//     NVML_VALUE_NOT_AVAILABLE is always reported" (nvmlProcessInfo_t). A
//     [Process] says so (UsedKnown false) rather than report that value as
//     a number of bytes.
//
//   - MIG. "In MIG mode, if device handle is provided, the API returns
//     aggregate information, only if the caller has appropriate privileges.
//     Per-instance information can be queried by using specific MIG device
//     handles": the MIG UUID CUDA gives a MIG instance yields that handle.
//
//   - Names. nvmlSystemGetProcessName gives a process's name, "cropped to
//     provided length", or NVML_ERROR_NOT_FOUND "if process doesn't
//     exists": a process may exit between the list and its name.
//
//   - PIDs. NVML reports the PIDs the driver knows, the host's. In a
//     container with a PID namespace of its own, the process's PID
//     (os.Getpid) is not the host's, and the process is not found in the
//     list under it; memtrack then falls back to device-wide figures.
package nvml
