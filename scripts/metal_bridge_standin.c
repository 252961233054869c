// metal_bridge_standin.c: a stand-in for metal_bridge.m in plain C, for
// scripts/metal-standin.sh, which runs the Metal backend's cgo layer and its
// macOS tests on Linux. It implements metal_bridge.h with calloc and free:
// one device, buffers rounded up to 16 KiB pages, zeroed, and the device's
// allocated figure kept the way Metal keeps currentAllocatedSize. It says
// nothing about Metal itself; it proves that the Go side, the cgo calls
// included, does what the tests ask of it.

//go:build metal && linux && cgo

#include <stdio.h>
#include <stdlib.h>

#include "metal_bridge.h"

#define PAGE 16384u
#define HEADER 16u // the buffer's allocated size, before its contents

static const uintptr_t device = 1;
static uint64_t allocated; // atomic

int mtb_copy_devices(uintptr_t *devs, int cap) {
	if (cap < 1) {
		return 0;
	}
	devs[0] = device;
	return 1;
}

uint64_t mtb_max_buffer_length(uintptr_t dev) { return dev == device ? 1ull << 30 : 0; }

uintptr_t mtb_new_buffer(uintptr_t dev, uint64_t length) {
	if (dev != device || length == 0) {
		return 0;
	}
	uint64_t size = (length + PAGE - 1) / PAGE * PAGE;
	uint64_t *buf = calloc(1, HEADER + size);
	if (buf == NULL) {
		return 0;
	}
	buf[0] = size;
	__atomic_add_fetch(&allocated, size, __ATOMIC_SEQ_CST);
	return (uintptr_t)buf;
}

void *mtb_buffer_contents(uintptr_t buf) { return (char *)buf + HEADER; }

uint64_t mtb_buffer_allocated_size(uintptr_t buf) { return ((uint64_t *)buf)[0]; }

void mtb_release(uintptr_t obj) {
	if (obj == device) {
		return;
	}
	__atomic_sub_fetch(&allocated, ((uint64_t *)obj)[0], __ATOMIC_SEQ_CST);
	free((void *)obj);
}

void mtb_mem_info(uintptr_t dev, uint64_t *working_set, uint64_t *alloc) {
	*working_set = 8ull << 30;
	*alloc = __atomic_load_n(&allocated, __ATOMIC_SEQ_CST);
}

uint64_t mtb_registry_id(uintptr_t dev) { return dev == device ? 0x1000003f2ull : 0; }

void mtb_device_name(uintptr_t dev, char *name, int cap) {
	if (cap > 0) {
		snprintf(name, (size_t)cap, "%s", dev == device ? "memtrack Metal stand-in" : "");
	}
}
