package memtrack

import "strconv"

// Kind is a kind of device: the memory a [Device] allocates.
type Kind uint8

// The kinds of device. KindCPU is the zero Kind.
const (
	KindCPU   Kind = iota // host memory
	KindCUDA              // NVIDIA GPU memory, built with -tags cuda
	KindMetal             // Apple GPU memory, built with -tags metal on macOS
	numKinds
)

var kindNames = [numKinds]string{KindCPU: "cpu", KindCUDA: "cuda", KindMetal: "metal"}

// String returns "cpu", "cuda" or "metal".
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// buildTag is the build tag that compiles the backend of k.
func (k Kind) buildTag() string { return k.String() }
