//go:build cuda

package memtrack

import (
	"strings"
	"testing"
)

// TestElasticRegistersNothingCUDA: on a CUDA GPU, every query of elastic
// memory and every call of it refused leaves UsedDevices as it was, on
// each device of two (the fake driver's, FAKECUDA_DEVICES=2, or a
// machine's), and on the fake driver where a device lacks virtual memory
// management (FAKECUDA_VMM) or the driver lacks its calls (FAKECUDA_HIDE).
func TestElasticRegistersNothingCUDA(t *testing.T) {
	// Info reads, and registers nothing, in this process and in the
	// children, which run this function too.
	info, err := Device{kind: KindCUDA}.Info()
	fake := err == nil && strings.HasPrefix(info.Name, "memtrack fakecuda")
	for _, tc := range []struct {
		name     string
		d        Device
		vmm      bool
		env      []string
		fakeOnly bool
	}{
		{"cuda:0", Device{kind: KindCUDA}, true, []string{"FAKECUDA_DEVICES=2"}, false},
		{"cuda:1", Device{kind: KindCUDA, ordinal: 1}, true, []string{"FAKECUDA_DEVICES=2"}, false},
		{"cuda:1 without virtual memory management", Device{kind: KindCUDA, ordinal: 1}, false,
			[]string{"FAKECUDA_DEVICES=2", "FAKECUDA_VMM=1,0"}, true},
		{"cuda:0 on a driver without cuMemAddressReserve", Device{kind: KindCUDA}, false,
			[]string{"FAKECUDA_DEVICES=2", "FAKECUDA_HIDE=cuMemAddressReserve"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fakeOnly && !fake {
				t.Skip("needs the fake driver of testdata/fakecuda (scripts/test-cuda.sh)")
			}
			testElasticRegistersNothing(t, tc.d, tc.vmm, tc.env...)
		})
	}
}
