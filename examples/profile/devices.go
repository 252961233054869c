package main

import (
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/memtrack/memtrack"
)

// profileDevices profiles one forward pass over several devices at once,
// as a tensor-parallel engine runs it, and sizes the KV cache they hold
// together: each device takes its baseline and its share of the weights,
// then memtrack.MeasureDevices measures one pass in which every request's
// activations of each layer are split across the devices, each device's
// cache is budgeted by vLLM's formula, and the common budget is the fewest
// blocks any device can hold, named with the device that limits it.
//
// With -fit, each device's share of the load is planned and predicted
// before any of it is made (planFit), and checked once it is; the last
// line sums the devices' figures.
func profileDevices(names []string, utilization float64, block int64, workers, layers int, act, weights, cacheBlocks int64, fo fitOptions) {
	var devs []memtrack.Device
	for _, name := range names {
		d, err := memtrack.ParseDevice(name)
		check(err)
		devs = append(devs, d)
	}
	n := int64(len(devs))
	bases := make([]memtrack.Usage, len(devs))
	kvCaches := make([]memtrack.Category, len(devs))
	activations := make([]memtrack.Category, len(devs))
	var fits []*fitRun
	for i, d := range devs {
		var err error
		bases[i], err = d.Baseline()
		check(err)
		if fo.on {
			load := fitLoad{weights: weights / n, cacheVia: memtrack.ViaAlloc, block: block, cacheBlocks: cacheBlocks, blockSize: block}
			load.transient, load.transientOf = passBound(workers, act/n)
			fits = append(fits, planFit(d, fo, load))
		}
	}
	for i, d := range devs {
		var weightsCat memtrack.Category
		weightsCat, kvCaches[i], activations[i] = categories(d)
		// Each device holds its share of every layer's weights.
		w, err := weightsCat.Alloc(weights / n)
		check(err)
		defer w.Free()
		touch(w)
	}

	share := act / n
	ms, err := memtrack.MeasureDevices(devs, func() error { return splitPass(activations, workers, layers, share) })
	check(err)

	fmt.Printf("one forward pass over %s, each layer's activations split %d ways\n", strings.Join(names, ", "), n)
	var budgets []memtrack.Budget
	var refused []string
	for i, m := range ms {
		printMeasurement(bases[i], m, workers, layers, share)
		fmt.Printf("KV cache by vLLM's formula (Measurement.Budget):\n")
		b, err := m.Budget(bases[i], utilization, block)
		if err != nil {
			if !errors.Is(err, memtrack.ErrOutOfMemory) {
				log.Fatal(err)
			}
			fmt.Printf("  refused, as vLLM refuses to start: %v\n", err)
			refused = append(refused, m.Device.String())
			continue
		}
		printBudget(b, "weights", "untracked growth since the baseline")
		budgets = append(budgets, b)
	}
	cacheN := cacheBlocks // with -fit, the plan's, which the prediction said fit
	if len(refused) > 0 {
		fmt.Printf("KV cache common to the devices: refused, as vLLM refuses to start: %s refused\n", strings.Join(refused, ", "))
		if !fo.on {
			os.Exit(1)
		}
	} else {
		c, err := memtrack.NewCommonBudget(budgets...)
		check(err)
		printCommonBudget(c)
		if !fo.on {
			if c.Blocks == 0 {
				os.Exit(1)
			}
			cacheN = min(cacheBlocks, c.Blocks)
		}
	}

	for i := range devs {
		cache, err := allocCache(kvCaches[i], cacheN, block)
		check(err)
		defer freeAll(cache)
	}
	for _, r := range fits {
		r.done()
	}
	for _, d := range devs {
		fmt.Printf("%v: ", d)
		printCategories(d)
	}
	if fo.on {
		for _, r := range fits {
			r.printCheck()
			fmt.Println(fitLine([]*fitRun{r}))
		}
		fmt.Println(fitLine(fits))
	}
}

// printCommonBudget writes the blocks every device can hold, and which
// device limits them.
func printCommonBudget(c memtrack.CommonBudget) {
	var each []string
	for _, b := range c.Budgets {
		each = append(each, fmt.Sprintf("%v %d", b.Device, b.Blocks))
	}
	fmt.Printf("KV cache common to the devices (NewCommonBudget):\n")
	fmt.Printf("  blocks each can hold: %s\n", strings.Join(each, ", "))
	fmt.Printf("  limited by:           %v\n", c.Budgets[c.Limiting].Device)
	fmt.Printf("  cache:                %s on each device, %d blocks of %s\n", size(c.CacheSize), c.Blocks, size(c.BlockSize))
}

// splitPass runs the forward pass on every device at once, each with its
// share of every request's activations (forwardPass), as tensor
// parallelism splits each layer across the devices.
func splitPass(activations []memtrack.Category, workers, layers int, share int64) error {
	var wg sync.WaitGroup
	errs := make([]error, len(activations))
	for i, a := range activations {
		wg.Go(func() { errs[i] = forwardPass(a, workers, layers, share) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
