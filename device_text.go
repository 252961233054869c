package memtrack

// MarshalText writes the device as [Device.String] does, so that a [Stats]
// encodes as JSON with "Device": "cuda:0".
func (d Device) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a device as [ParseDevice] does; the device must exist
// in this build and on this machine.
func (d *Device) UnmarshalText(text []byte) error {
	v, err := ParseDevice(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
