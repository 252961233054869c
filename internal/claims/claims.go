package claims

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Version is the version of the claim files this package writes and reads.
const Version = 1

// suffix ends the name of every claim file; a temporary file begins with
// a dot and has none.
const suffix = ".claim"

// Claim is one process's announcement of the memory it is about to take
// on a device.
type Claim struct {
	Version int    `json:"version"`
	Device  string `json:"device"` // the device's key
	Bytes   int64  `json:"bytes"`  // what the owner is about to take
	// Base is the owner's memory on the device when it claimed, as the
	// driver accounts it; -1 where it was not known.
	Base    int64     `json:"base"`
	Owner   Owner     `json:"owner"`
	Made    time.Time `json:"made"`
	Expires time.Time `json:"expires"`
	// Name is the claim's file name in its board: set by Read and Post,
	// not written to the file.
	Name string `json:"-"`
}

// Owner is a process, as a claim names it across hosts and PID
// namespaces.
type Owner struct {
	Host  string `json:"host"`  // the host's name (a container's own, in a container)
	PIDNS string `json:"pidns"` // the PID namespace ("pid:[4026531836]"); "" where unknown
	PID   int    `json:"pid"`   // in that namespace
	// Start is the process's start time, in clock ticks after the host's
	// boot (/proc/PID/stat); 0 where unknown.
	Start uint64 `json:"start"`
}

// The errors of the package.
var (
	// ErrInvalid: a claim or a directory the board refuses.
	ErrInvalid = errors.New("invalid claim")
	// ErrWithdrawn: a claim withdrawn already.
	ErrWithdrawn = errors.New("claim withdrawn")
)

// Board is a directory of claims.
type Board struct{ dir string }

// Open opens the board of directory dir, making it, where it is missing,
// with mode 1777 (the sticky bit, and every user's writes), so that every
// user's processes may post claims and only a claim's owner may replace or
// remove it. An existing directory is taken as it is.
func Open(dir string) (*Board, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: no directory given", ErrInvalid)
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, err
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		} else if err == nil {
			// Mkdir's mode passes through the umask: the mode is set apart.
			if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
				return nil, err
			}
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrInvalid, dir)
	}
	return &Board{dir: dir}, nil
}

// Dir returns the board's directory.
func (b *Board) Dir() string { return b.dir }

// Posted is a claim this process posted: it renews it and withdraws it.
// Its methods are safe for concurrent use.
type Posted struct {
	b  *Board
	mu sync.Mutex
	c  Claim
	// withdrawn says that Withdraw removed the file.
	withdrawn bool
}

// Post writes claim c, which must be valid ([Check]), to the board, and
// returns it posted, its Name set.
func (b *Board) Post(c Claim) (*Posted, error) {
	c.Version = Version
	if err := Check(c); err != nil {
		return nil, err
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	c.Name = fileKey(c.Device) + "." + hex.EncodeToString(r[:]) + suffix
	if err := b.write(c); err != nil {
		return nil, err
	}
	return &Posted{b: b, c: c}, nil
}

// write writes c whole into a temporary file of the board and renames it
// to c.Name, so that a reader sees all of it or nothing.
func (b *Board) write(c Claim) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(b.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("posting a claim in %s: %w", b.dir, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644) // every user's followers read it
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(b.dir, c.Name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("posting a claim in %s: %w", b.dir, err)
	}
	return nil
}

// Claim returns the claim as posted last.
func (p *Posted) Claim() Claim {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

// Renew moves the claim's expiry to expires. It fails with [ErrWithdrawn]
// once the claim is withdrawn, and with ErrInvalid for an expiry not after
// the claim was made, each changing nothing.
func (p *Posted) Renew(expires time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.withdrawn {
		return fmt.Errorf("%w: renewal of the claim of %d bytes on %s", ErrWithdrawn, p.c.Bytes, p.c.Device)
	}
	c := p.c
	c.Expires = expires
	if err := Check(c); err != nil {
		return err
	}
	if err := p.b.write(c); err != nil {
		return err
	}
	p.c = c
	return nil
}

// Withdraw removes the claim from the board. A second Withdraw fails with
// [ErrWithdrawn].
func (p *Posted) Withdraw() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.withdrawn {
		return fmt.Errorf("%w: the claim of %d bytes on %s", ErrWithdrawn, p.c.Bytes, p.c.Device)
	}
	if err := os.Remove(filepath.Join(p.b.dir, p.c.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("withdrawing the claim of %d bytes on %s: %w", p.c.Bytes, p.c.Device, err)
	}
	p.withdrawn = true
	return nil
}

// Reading is what Read found of one device's claims.
type Reading struct {
	// Claims are the live claims, the oldest first (by Made, then Name).
	Claims []Claim
	// Expired and Dead count the claims skipped for their expiry, and for
	// an owner that no longer runs; Unreadable those whose files could not
	// be read or parsed (a file being replaced is read again once).
	Expired, Dead, Unreadable int
}

// Read returns the live claims on device at time now, self being the
// reading process (for [Alive]). It removes the files of the claims it
// skips for their expiry or their owner's death, where the directory lets
// it, and skips, counting them, the files it cannot parse.
func (b *Board) Read(device string, now time.Time, self Owner) (Reading, error) {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return Reading{}, fmt.Errorf("reading the claims of %s: %w", b.dir, err)
	}
	var r Reading
	prefix := fileKey(device) + "."
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		c, err := b.readFile(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // withdrawn meanwhile
		case err != nil:
			r.Unreadable++
			continue
		case c.Device != device:
			continue // another key of the same file name
		}
		switch alive, known := Alive(c.Owner, self); {
		case !now.Before(c.Expires):
			r.Expired++
		case known && !alive:
			r.Dead++
		default:
			r.Claims = append(r.Claims, c)
			continue
		}
		_ = os.Remove(filepath.Join(b.dir, name)) // another user's, in a sticky directory, stays
	}
	slices.SortFunc(r.Claims, func(a, b Claim) int {
		return cmp.Or(a.Made.Compare(b.Made), strings.Compare(a.Name, b.Name))
	})
	return r, nil
}

// readFile reads and parses one claim file.
func (b *Board) readFile(name string) (Claim, error) {
	data, err := os.ReadFile(filepath.Join(b.dir, name))
	if err != nil {
		return Claim{}, err
	}
	c, err := Parse(data)
	if err != nil {
		return Claim{}, err
	}
	c.Name = name
	return c, nil
}

// Parse reads a claim file's contents: JSON of this package's Version,
// with no field it does not know, and a valid claim ([Check]).
func Parse(data []byte) (Claim, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var c Claim
	if err := d.Decode(&c); err != nil {
		return Claim{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if d.More() {
		return Claim{}, fmt.Errorf("%w: data after the claim", ErrInvalid)
	}
	if c.Version != Version {
		return Claim{}, fmt.Errorf("%w: version %d, want %d", ErrInvalid, c.Version, Version)
	}
	if err := Check(c); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// Check refuses a claim that is not one: without a device, of no bytes,
// with a Base below -1, without an owner's PID, or that expires before it
// is made.
func Check(c Claim) error {
	switch {
	case c.Device == "" || strings.ContainsAny(c.Device, "\x00/"):
		return fmt.Errorf("%w: device %q", ErrInvalid, c.Device)
	case c.Bytes <= 0:
		return fmt.Errorf("%w: %d bytes claimed: want more than 0", ErrInvalid, c.Bytes)
	case c.Base < -1:
		return fmt.Errorf("%w: a base of %d bytes", ErrInvalid, c.Base)
	case c.Owner.PID <= 0:
		return fmt.Errorf("%w: owner's PID %d", ErrInvalid, c.Owner.PID)
	case c.Made.IsZero() || !c.Expires.After(c.Made):
		return fmt.Errorf("%w: made %v, expiring %v: want an expiry after it was made", ErrInvalid, c.Made, c.Expires)
	}
	return nil
}

// Effective returns what claim c counts for where its owner's memory on
// the device, as the driver accounts it, is used (known: the reader sees
// it): its bytes less the owner's growth since it claimed, at least 0;
// all its bytes where the growth is not known.
func Effective(c Claim, used int64, known bool) int64 {
	if !known || c.Base < 0 || used <= c.Base {
		return c.Bytes
	}
	grown := used - c.Base
	return max(c.Bytes-grown, 0)
}

// fileKey is a device's key as a file name's first part: its letters,
// digits, '-' and '_' kept, every other byte written '_' (the file's
// contents keep the key whole).
func fileKey(device string) string {
	b := []byte(device)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
