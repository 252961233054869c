//go:build rocm

package memtrack

import "testing"

// TestElasticRegistersNothingROCm: an AMD GPU has no reservations; every
// call of elastic memory on one is refused (ErrNotSupported, or
// ErrInvalidSize first) and leaves UsedDevices as it was, on each device
// of two (the fake runtime's, FAKEHIP_DEVICES=2, or a machine's).
func TestElasticRegistersNothingROCm(t *testing.T) {
	for _, d := range []Device{{kind: KindROCm}, {kind: KindROCm, ordinal: 1}} {
		t.Run(d.String(), func(t *testing.T) {
			testElasticRegistersNothing(t, d, false, "FAKEHIP_DEVICES=2")
		})
	}
}
