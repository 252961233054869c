//go:build rocm

package hiptest

// A memory pool's attributes set to any value, for the tests of the
// values the runtime refuses.

/*
#include <stdint.h>

#include "calls.h"

static hipError_t hiptest_pool_set(uintptr_t pool, int attr, uint64_t value) {
	return HIPTEST_CALL(hiptest_lib.hipMemPoolSetAttribute, (hipMemPool_t)pool, attr, &value);
}
*/
import "C"

import "github.com/memtrack/memtrack/internal/hipdrv"

// PoolFigureAttributes are the four figures of hipMemPoolAttr, each a
// uint64_t: the reserved memory and its high watermark, the used memory and
// its high watermark (hipMemPoolAttrReservedMemCurrent to
// hipMemPoolAttrUsedMemHigh).
var PoolFigureAttributes = [...]int{
	C.hipMemPoolAttrReservedMemCurrent, C.hipMemPoolAttrReservedMemHigh,
	C.hipMemPoolAttrUsedMemCurrent, C.hipMemPoolAttrUsedMemHigh,
}

// PoolSetAttribute sets a uint64_t attribute of pool to value
// (hipMemPoolSetAttribute).
func PoolSetAttribute(pool hipdrv.Pool, attr int, value uint64) hipdrv.Result {
	return hipdrv.Result(C.hiptest_pool_set(C.uintptr_t(pool), C.int(attr), C.uint64_t(value)))
}
