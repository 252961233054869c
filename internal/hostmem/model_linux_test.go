package hostmem

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCPUInfo(t *testing.T) {
	tests := []struct {
		name, cpuinfo, want string
	}{
		{"x86", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n" +
			"model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu vme\n\n" +
			"processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n",
			"Intel(R) Xeon(R) Platinum 8480+"},
		{"model name wins over a cpu line before it", "cpu\t\t: POWER9\nmodel name\t: AMD EPYC 9654 96-Core Processor\n",
			"AMD EPYC 9654 96-Core Processor"},
		{"arm64 board", "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n\n" +
			"Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n",
			"Raspberry Pi 4 Model B Rev 1.4"},
		{"arm64 server, no model", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n", ""},
		{"POWER", "processor\t: 0\ncpu\t\t: POWER9 (architected), altivec supported\nclock\t\t: 2166.000000MHz\n",
			"POWER9 (architected), altivec supported"},
		{"MIPS", "system type\t\t: MT7621\ncpu model\t\t: MIPS 1004Kc V2.15\n", "MIPS 1004Kc V2.15"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCPUInfo(strings.NewReader(tt.cpuinfo))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseCPUInfoReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := parseCPUInfo(iotest.ErrReader(boom))
	assert.ErrorIs(t, err, boom)
}
