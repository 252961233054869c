package memtrack

// Usage puts the bytes this package counts on a device beside what the OS or
// driver reports for the whole device, and names their difference.
//
// The two never agree, and should not: the tracked figure is the sum of the
// sizes of live buffers allocated through this package, while the reported
// figure is everything the device has in use. On a GPU the difference holds
// the CUDA context (hundreds of MiB), the memory of libraries that allocate
// on their own (cuBLAS workspaces, NCCL buffers), other processes, and the
// driver's rounding of each allocation; on the CPU it holds the rest of the
// process and of the machine (or cgroup).
type Usage struct {
	Device    Device
	Tracked   int64 // bytes held by live buffers, as counted ([Device.MemoryAllocated])
	Total     int64 // the device's memory, as reported
	Free      int64 // free memory, as reported
	Used      int64 // Total - Free: memory in use on the device, by anyone
	Untracked int64 // Used - Tracked: memory in use that this package did not allocate
}

// Usage returns the tracked figure and the reported figures of the device
// side by side; see [Usage] for how to read their difference.
func (d Device) Usage() (Usage, error) {
	tracked := d.MemoryAllocated()
	free, total, err := d.MemGetInfo()
	if err != nil {
		return Usage{Device: d, Tracked: tracked}, err
	}
	used := max(total-free, 0)
	return Usage{Device: d, Tracked: tracked, Total: total, Free: free, Used: used, Untracked: used - tracked}, nil
}
