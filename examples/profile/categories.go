package main

import (
	"fmt"

	"github.com/memtrack/memtrack"
)

// categories makes the device's categories of the weights, the KV cache
// and the activations.
func categories(dev memtrack.Device) (weights, kvCache, activations memtrack.Category) {
	var err error
	weights, err = dev.Category(memtrack.CategoryWeights)
	check(err)
	kvCache, err = dev.Category(memtrack.CategoryKVCache)
	check(err)
	activations, err = dev.Category(memtrack.CategoryActivations)
	check(err)
	return weights, kvCache, activations
}

// allocCache allocates n blocks of the KV cache in its category.
func allocCache(kv memtrack.Category, n, block int64) ([]*memtrack.Buffer, error) {
	var bufs []*memtrack.Buffer
	for range n {
		b, err := kv.Alloc(block)
		if err != nil {
			freeAll(bufs)
			return nil, err
		}
		touch(b)
		bufs = append(bufs, b)
	}
	return bufs, nil
}

func freeAll(bufs []*memtrack.Buffer) {
	for _, b := range bufs {
		check(b.Free())
	}
}

// printCategories writes each category's figures, and those of the memory
// outside them.
func printCategories(dev memtrack.Device) {
	fmt.Printf("memory by category (with %s of the KV cache allocated):\n", size(cacheBytes(dev)))
	for _, c := range dev.CategoryStats() {
		peak := size(c.PeakTracked)
		if c.Category == memtrack.Uncategorised {
			peak = "-"
		}
		fmt.Printf("  %-14s %10s tracked, %10s peak, %3d buffers, %4d allocs\n", c.Category, size(c.Tracked), peak, c.Buffers, c.Allocs)
	}
}

func cacheBytes(dev memtrack.Device) int64 {
	for _, c := range dev.CategoryStats() {
		if c.Category == memtrack.CategoryKVCache {
			return c.Tracked
		}
	}
	return 0
}
