//go:build metal && darwin && !ios && cgo

// metal_bridge.m: the Objective-C side of the Metal backend, behind the C
// functions of metal_bridge.h (see metal_bridge_cgo_darwin.go for why this
// file carries the same //go:build line as the cgo Go file).
//
// Memory management is ARC. A handle is an object retained for Go: it is
// made with __bridge_retained, which hands Go one reference, and
// mtb_release gives that reference back with CFRelease. Every entry point
// runs inside an autorelease pool, because Go calls it on threads that have
// none. Metal devices and buffers are safe to use from many threads.

#import <CoreFoundation/CoreFoundation.h>
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <string.h>

#include "metal_bridge.h"

#if !__has_feature(objc_arc)
#error "metal_bridge.m needs ARC: build it through metal_bridge_cgo_darwin.go, whose #cgo CFLAGS pass -fobjc-arc"
#endif

static uintptr_t retained_handle(id obj) { return (uintptr_t)(__bridge_retained void *)obj; }

static id<MTLDevice> device_of(uintptr_t h) { return (__bridge id<MTLDevice>)(void *)h; }

static id<MTLBuffer> buffer_of(uintptr_t h) { return (__bridge id<MTLBuffer>)(void *)h; }

int mtb_copy_devices(uintptr_t *devs, int cap) {
	@autoreleasepool {
		NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
		if (all.count == 0) {
			// Where the list comes back empty, the system default device is
			// the last resort (it needs CoreGraphics linked, see the cgo
			// file).
			id<MTLDevice> d = MTLCreateSystemDefaultDevice();
			all = d != nil ? @[ d ] : @[];
		}
		// MTLCopyAllDevices promises no order: sort by registryID, which
		// identifies a GPU for as long as the system runs.
		NSArray<id<MTLDevice>> *sorted = [all sortedArrayUsingComparator:^NSComparisonResult(id<MTLDevice> a, id<MTLDevice> b) {
			if (a.registryID < b.registryID) {
				return NSOrderedAscending;
			}
			return a.registryID > b.registryID ? NSOrderedDescending : NSOrderedSame;
		}];
		int n = 0;
		for (id<MTLDevice> d in sorted) {
			if (n >= cap) {
				break;
			}
			devs[n++] = retained_handle(d);
		}
		return n;
	}
}

uint64_t mtb_max_buffer_length(uintptr_t dev) {
	@autoreleasepool {
		return (uint64_t)device_of(dev).maxBufferLength;
	}
}

uintptr_t mtb_new_buffer(uintptr_t dev, uint64_t length) {
	@autoreleasepool {
		id<MTLBuffer> buf = [device_of(dev) newBufferWithLength:(NSUInteger)length options:MTLResourceStorageModeShared];
		if (buf == nil) {
			return 0;
		}
		return retained_handle(buf);
	}
}

void *mtb_buffer_contents(uintptr_t buf) {
	@autoreleasepool {
		return [buffer_of(buf) contents];
	}
}

uint64_t mtb_buffer_allocated_size(uintptr_t buf) {
	@autoreleasepool {
		return (uint64_t)buffer_of(buf).allocatedSize;
	}
}

void mtb_release(uintptr_t obj) {
	@autoreleasepool {
		CFRelease((CFTypeRef)(void *)obj);
	}
}

void mtb_mem_info(uintptr_t dev, uint64_t *working_set, uint64_t *allocated) {
	@autoreleasepool {
		id<MTLDevice> d = device_of(dev);
		*working_set = d.recommendedMaxWorkingSetSize;
		*allocated = (uint64_t)d.currentAllocatedSize;
	}
}

uint64_t mtb_registry_id(uintptr_t dev) {
	@autoreleasepool {
		return device_of(dev).registryID;
	}
}

void mtb_device_name(uintptr_t dev, char *name, int cap) {
	@autoreleasepool {
		if (cap <= 0) {
			return;
		}
		const char *s = device_of(dev).name.UTF8String;
		strlcpy(name, s != NULL ? s : "", (size_t)cap);
	}
}
