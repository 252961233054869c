//go:build rocm && !cuda

package memtrack

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The fake runtime reads its environment on the first call, which
	// comes later.
	for k, v := range hipFakeDefaults {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}
