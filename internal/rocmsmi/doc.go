// Package rocmsmi is memtrack's binding of AMD's ROCm SMI library
// (librocm_smi64, built with -tags rocm). It answers one question for
// memtrack's per-process figures on AMD GPUs: which processes hold device
// memory on a GPU, and how much the kernel attributes to each, this
// process included.
//
// [Open] loads the library with dlopen (the first of [Libraries] that
// loads: the major-versioned names of AMD's ROCm releases, Debian's
// librocm_smi64.so.1, then the bare name) and finds its calls with dlsym
// (library.c); library.h declares the few types and values used. So
// nothing needs rocm_smi.h to build, and a binary carries no unresolved
// SMI symbol: it starts where the library is missing, even under immediate
// binding. Open then says why rocm_smi is unavailable, in the dynamic
// loader's words, or in the library's own where it loads but does not
// initialise: AMD's library of ROCm 5.2.3 (Debian's librocm-smi64-1) on a
// machine without an AMD GPU loads, has every call, and fails at rsmi_init
// with RSMI_STATUS_INIT_ERROR, "An error occurred during initialization,
// during monitor discovery or when when initializing internal data
// structures". Nothing here runs on memtrack's allocation path.
//
// # Which source: rocm_smi's compute processes
//
// Three sources give a process's VRAM on an AMD GPU. This package reads
// rocm_smi's compute-process figures, for these reasons.
//
//   - rocm_smi's figures are the kernel's accounting of compute processes:
//     the KFD driver's per-process, per-GPU VRAM (rocm_smi reads
//     /sys/class/kfd/kfd/proc/PID/vram_GPUID), which counts exactly the
//     memory a HIP runtime allocates through the kernel (hipMalloc, the
//     pools), what memtrack sets beside its own count. The ABI is stable:
//     rsmi_process_info_t is the same from ROCm 4.0 to the current header,
//     and the calls used exist from ROCm 4.0 on. Debian ships the library
//     (librocm-smi64-1, ROCm 5.2.3), so CI checks the package against AMD's
//     own code (scripts/test-rocm.sh).
//
//   - amdsmi's process list (amdsmi_get_gpu_process_list, libamd_smi.so)
//     is not a source of its own: AMD's implementation reads the kernel's
//     DRM fdinfo files (amdsmi's src/amd_smi/fdinfo.cc), adding each file's
//     drm-memory-vram without the drm-client-id check the kernel's
//     documentation asks for. Its amdsmi_proc_info_t changed layout from
//     ROCm 5.5 to 5.7 (its engine_usage) and again later (name and
//     container_name from 32 to 64 bytes), under the same function name,
//     so a binding must know the library's version before it may read one;
//     and Debian does not ship it.
//
//   - The kernel's DRM fdinfo (Documentation/gpu/drm-usage-stats.rst: each
//     open DRM file lists drm-pdev, the device's PCI address, drm-client-id,
//     and per memory region drm-total-, drm-shared-, drm-resident-;
//     drm-memory-<region> "is deprecated and is only printed by amdgpu; it
//     is an alias for drm-resident-<region>") needs no library, and gives
//     each process's figure per device. But another process's
//     /proc/PID/fdinfo is readable only with ptrace access to it (another
//     user's processes, a hidepid /proc, are invisible), resident VRAM
//     leaves out what is evicted, buffers shared between processes count in
//     each, and whether a KFD allocation appears in the fdinfo of the render
//     node the runtime opened, AMD's and the kernel's documents do not say;
//     without a GPU to show it, it is not shown to be more faithful.
//
// What rocm_smi costs, and how the package bears it:
//
//   - Per device. rsmi_compute_process_info_by_pid_get gives a process's
//     VRAM summed over the devices it uses; the figure on one device comes
//     with rsmi_compute_process_info_by_device_get, which ROCm 5.7 added
//     ([Library].PerDevice). Without it (Debian's 5.2), a process's figure
//     is its device's where rsmi_compute_process_gpus_get lists that device
//     alone, and unknown otherwise ([Process].UsedKnown).
//
//   - The list's fields. rsmi_compute_process_info_get "write[s] up to
//     *num_items instances of rsmi_process_info_t", without saying which
//     fields it fills; AMD's ROCm 5.2 library fills the PID and PASID only
//     (rocm_smi_lib issue 165). The package takes the PIDs from the list and
//     each figure from the per-process calls.
//
//   - Which devices a process "is using" (rsmi_compute_process_gpus_get),
//     the reference does not define; AMD's implementation lists the devices
//     where the process has a queue, so a process that allocated on a
//     device but launched nothing there is not on it for a library without
//     the per-device call (testdata/fakesmi offers both readings).
//
//   - PIDs. The kernel reports the host's PIDs: in a container with a PID
//     namespace of its own, this process is not found under os.Getpid
//     ([Usage].SelfFound is false), and memtrack falls back to the
//     device-wide figures, as with NVML on NVIDIA GPUs.
//
// # The devices
//
// rocm_smi numbers devices its own way, and HIP_VISIBLE_DEVICES or
// ROCR_VISIBLE_DEVICES renumber HIP's ordinals, so a device is found by its
// PCI address, never by its ordinal: HIP's hipDeviceGetPCIBusId
// (domain:bus:device.function, hexadecimal) against rsmi_dev_pci_id_get's
// BDFID, "((DOMAIN & 0xffffffff) << 32) | ((BUS & 0xff) << 8) | ((DEVICE &
// 0x1f) <<3 ) | (FUNCTION & 0x7)" ([ParseBusID]).
//
// # The list's resize protocol
//
// Both list calls are read the way their reference gives: first with a
// NULL buffer, "a way to determine how much memory should be allocated",
// then with a buffer, again with a larger one while the library answers
// RSMI_STATUS_INSUFFICIENT_SIZE ("there were more processes for which
// information was available, but not enough space was provided"): the list
// changes as processes come and go. A process that exits between the list
// and its figures (RSMI_STATUS_NOT_FOUND) is left out. Names come from
// /proc/PID/comm, which rocm_smi does not give.
package rocmsmi
