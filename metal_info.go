package memtrack

import "strconv"

// info returns the Metal device's name and its registryID in hex, as ioreg
// prints it ("0x1000003f2"): the registry ID names the GPU for as long as
// the system runs, and is how the bridge orders the devices.
func (m *metalBackend) info(ordinal int) (name, uuid string, err error) {
	d, err := m.device(ordinal)
	if err != nil {
		return "", "", err
	}
	return m.bridge.name(d.handle), "0x" + strconv.FormatUint(m.bridge.registryID(d.handle), 16), nil
}
