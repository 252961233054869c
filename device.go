package memtrack

import (
	"strconv"
	"strings"
)

// Kind is a kind of device: the memory a [Device] allocates.
type Kind uint8

// The kinds of device. The zero Kind is none of them: it is the kind of the
// zero [Device], which is no device.
const (
	KindCPU   Kind = iota + 1 // host memory
	KindCUDA                  // NVIDIA GPU memory, built with -tags cuda
	KindMetal                 // Apple GPU memory, built with -tags metal on macOS
	KindROCm                  // AMD GPU memory, built with -tags rocm
	numKinds
)

var kindNames = [numKinds]string{0: "invalid", KindCPU: "cpu", KindCUDA: "cuda", KindMetal: "metal", KindROCm: "rocm"}

// String returns "cpu", "cuda", "metal" or "rocm", and "invalid" for the
// zero Kind.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// pooled reports whether devices of kind k may have memory pools: the
// kinds whose backend allocates in stream order (a streamBackend), which
// the stream-ordered, pool and graph calls are for. A call on a device of
// another kind fails without starting its backend.
func (k Kind) pooled() bool { return k < numKinds && kindPooled[k] }

var kindPooled = [numKinds]bool{KindCUDA: true, KindROCm: true}

// pooledKinds names the kinds that may have memory pools: "cuda and rocm".
func pooledKinds() string {
	var names []string
	for k := range numKinds {
		if k.pooled() {
			names = append(names, k.String())
		}
	}
	return strings.Join(names, " and ")
}

// processSource names the library that accounts for each process on a
// device of kind k, as the reports write it ("NVML", "rocm_smi"); own
// names what of this process it counts beside the buffers. Both are ""
// for the kinds without per-process figures (processBackend).
func (k Kind) processSource() (source, own string) {
	if k < numKinds {
		return kindProcesses[k].source, kindProcesses[k].own
	}
	return "", ""
}

var kindProcesses = [numKinds]struct{ source, own string }{
	KindCUDA: {"NVML", "its CUDA context"},
	KindROCm: {"rocm_smi", "the HIP runtime's own memory"},
}

// buildTag is the build tag that compiles the backend of k.
func (k Kind) buildTag() string { return k.String() }

// Device is one device: a [Kind] and an ordinal. It is a small comparable
// value. Obtain one from [CPU], [CUDA], [Metal], [ROCm], [ParseDevice] or [Devices],
// which check that the device exists.
//
// The zero Device is no device: it is what the constructors return beside
// an error, so that a device whose construction failed cannot be mistaken
// for a working one. Its methods that return an error fail with
// [ErrInvalidDevice]; its reads (MemoryAllocated, MemoryStats, ...) return
// zero figures; nothing it is given is counted anywhere.
type Device struct {
	kind    Kind
	ordinal int
}

// CPU returns the host device.
func CPU() Device { return Device{kind: KindCPU} }

// Kind returns the kind of the device.
func (d Device) Kind() Kind { return d.kind }

// Ordinal returns the device's ordinal among the devices of its kind.
func (d Device) Ordinal() int { return d.ordinal }

// String returns "cpu" for the CPU, "cuda:N", "metal:N" or "rocm:N" for
// GPUs, and "invalid" for the zero Device.
func (d Device) String() string {
	if d.kind == 0 {
		return "invalid"
	}
	if d.kind == KindCPU && d.ordinal == 0 {
		return "cpu"
	}
	return d.kind.String() + ":" + strconv.Itoa(d.ordinal)
}

// MarshalText writes the device as [Device.String] does, so that a [Stats]
// encodes as JSON with "Device": "cuda:0".
func (d Device) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
