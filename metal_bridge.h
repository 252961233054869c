//go:build metal && darwin && !ios && cgo

// metal_bridge.h: the C interface of metal_bridge.m, the only functions Go
// calls for the Metal backend. No Objective-C type appears here: devices and
// buffers are opaque handles, each an object retained for the caller, which
// gives it back with mtb_release. Every function is safe to call from many
// threads at once.

#ifndef MEMTRACK_METAL_BRIDGE_H
#define MEMTRACK_METAL_BRIDGE_H

#include <stdint.h>

// mtb_copy_devices stores a handle for each Metal device, ordered by
// registryID, in devs (at most cap of them), and returns how many it stored:
// every GPU of the Mac (MTLCopyAllDevices), else the system default device.
int mtb_copy_devices(uintptr_t *devs, int cap);

// mtb_max_buffer_length returns the device's maxBufferLength.
uint64_t mtb_max_buffer_length(uintptr_t dev);

// mtb_new_buffer allocates a zeroed buffer of length bytes in shared storage
// and returns its handle, or 0 if Metal returned no buffer.
uintptr_t mtb_new_buffer(uintptr_t dev, uint64_t length);

// mtb_buffer_contents returns the host address of the buffer's memory.
void *mtb_buffer_contents(uintptr_t buf);

// mtb_buffer_allocated_size returns the bytes Metal set aside for the buffer.
uint64_t mtb_buffer_allocated_size(uintptr_t buf);

// mtb_release gives back a handle from mtb_copy_devices or mtb_new_buffer.
void mtb_release(uintptr_t obj);

// mtb_mem_info stores the device's recommendedMaxWorkingSetSize and its
// currentAllocatedSize.
void mtb_mem_info(uintptr_t dev, uint64_t *working_set, uint64_t *allocated);

// mtb_registry_id returns the device's registryID.
uint64_t mtb_registry_id(uintptr_t dev);

// mtb_device_name stores the device's name in UTF-8 in name (at most cap
// bytes, the NUL included, cut short if longer).
void mtb_device_name(uintptr_t dev, char *name, int cap);

#endif
