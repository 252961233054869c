package otelmetric

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/memtrack/memtrack"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ScopeName is the name of the meter the instruments are created on (the
// instrumentation scope, otel_scope_name in Prometheus).
const ScopeName = "github.com/memtrack/memtrack/otelmetric"

// The attributes of memtrack's own instruments, beside hw.id.
const (
	// BackendKey names the device's backend: "cpu", "cuda" or "metal".
	BackendKey = attribute.Key("memtrack.backend")
	// OrdinalKey is the device's ordinal within its backend, as the
	// process numbers it (CUDA_VISIBLE_DEVICES renumbers GPUs; hw.id does
	// not change).
	OrdinalKey = attribute.Key("memtrack.ordinal")
	// CategoryKey names the category of a category instrument's point
	// ([memtrack.Device.Category]), or "uncategorised" for the memory
	// outside every category.
	CategoryKey = attribute.Key("memtrack.category")
)

// ErrAttribute is matched by the error [Register] returns for an attribute
// of [WithAttributes] that is invalid or that the instruments set
// themselves.
var ErrAttribute = errors.New("memtrack: invalid attribute")

// Option configures [Register].
type Option func(*config)

type config struct {
	attrs []attribute.KeyValue
}

// WithAttributes adds attributes with fixed values to every observation,
// such as the name of the model a process serves. A key the instruments
// set themselves (memtrack.backend, memtrack.ordinal, memtrack.category,
// any hw.* key) makes
// [Register] fail with an error matching [ErrAttribute]. Attributes that
// describe the process or host belong in the provider's resource instead.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// Register creates memtrack's instruments on a meter of mp and registers
// one callback that reads every used device's figures when a reader
// collects ([memtrack.UsedDevices]). Nothing is started and nothing is read
// in between. Call Unregister on the result to stop reporting.
//
// Register once per provider: a second registration on the same provider
// gets the same instruments from the SDK, which then adds the two
// callbacks' observations of a series, so that every sum is doubled.
func Register(mp metric.MeterProvider, opts ...Option) (metric.Registration, error) {
	c, err := newCollection(mp, opts)
	if err != nil {
		return nil, err
	}
	reg, err := c.meter.RegisterCallback(c.observeUsed, c.obs...)
	if err != nil {
		return nil, fmt.Errorf("memtrack: registering the callback: %w", err)
	}
	return reg, nil
}

// newCollection checks the options and creates the instruments on a
// meter of mp.
func newCollection(mp metric.MeterProvider, opts []Option) (*collection, error) {
	if mp == nil {
		return nil, errors.New("memtrack: Register: nil MeterProvider")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	for _, kv := range cfg.attrs {
		if !kv.Valid() {
			return nil, fmt.Errorf("%w %q: empty key or no value", ErrAttribute, kv.Key)
		}
		if kv.Key == BackendKey || kv.Key == OrdinalKey || kv.Key == CategoryKey || strings.HasPrefix(string(kv.Key), "hw.") {
			return nil, fmt.Errorf("%w %q: the instruments set it themselves", ErrAttribute, kv.Key)
		}
	}
	m := mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	obs := make([]metric.Observable, len(instruments))
	var errs []error
	for i, in := range instruments {
		var err error
		obs[i], err = create(m, in)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("memtrack: creating the instruments: %w", err)
	}
	return &collection{meter: m, obs: obs, attrs: cfg.attrs}, nil
}

// create creates the observable instrument of in on m.
func create(m metric.Meter, in instrument) (metric.Observable, error) {
	if in.ratio != nil {
		return m.Float64ObservableGauge(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
	}
	switch in.kind {
	case upDownCounter:
		return m.Int64ObservableUpDownCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
	case counter:
		return m.Int64ObservableCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
	}
	return m.Int64ObservableGauge(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
}

// collection is one registration's meter, its instruments (obs[i] is
// instruments[i]) and its fixed attributes.
type collection struct {
	meter metric.Meter
	obs   []metric.Observable
	attrs []attribute.KeyValue
}

// observeUsed is the callback: it reads every used device, then observes
// the readings.
func (c *collection) observeUsed(_ context.Context, o metric.Observer) error {
	c.observe(o, readUsed())
	return nil
}

// observe observes each figure of each reading.
func (c *collection) observe(o metric.Observer, readings []reading) {
	for _, r := range readings {
		own, hw, isGPU := c.attributes(&r)
		rows := rowAttributes(own, r.cats)
		for i, in := range instruments {
			set := own
			switch in.family {
			case gpu:
				if !isGPU {
					continue
				}
				set = hw
			case cpu:
				if r.kind != memtrack.KindCPU {
					continue
				}
			case category:
				observeRows(o, c.obs[i].(metric.Int64Observable), in, r.cats, rows)
				continue
			}
			if in.ratio != nil {
				if v, ok := in.ratio(&r); ok {
					o.ObserveFloat64(c.obs[i].(metric.Float64Observable), v, metric.WithAttributeSet(set))
				}
			} else if v, ok := in.value(&r); ok {
				o.ObserveInt64(c.obs[i].(metric.Int64Observable), v, metric.WithAttributeSet(set))
			}
		}
	}
}

// rowAttributes returns the attribute set of each of a device's category
// rows: the device's own and the row's memtrack.category.
func rowAttributes(own attribute.Set, rows []memtrack.CategoryStats) []attribute.Set {
	sets := make([]attribute.Set, len(rows))
	for j, row := range rows {
		sets[j] = attribute.NewSet(append(own.ToSlice(), CategoryKey.String(row.Category))...)
	}
	return sets
}

// observeRows observes instrument in, of the family category, for each
// category row that has its figure, with the row's attributes sets[j].
func observeRows(o metric.Observer, ob metric.Int64Observable, in instrument, rows []memtrack.CategoryStats, sets []attribute.Set) {
	for j := range rows {
		if v, ok := in.row(&rows[j]); ok {
			o.ObserveInt64(ob, v, metric.WithAttributeSet(sets[j]))
		}
	}
}

// attributes returns the attribute sets of one device: own for memtrack's
// instruments, and hw for the hardware conventions' where the device is a
// GPU that the driver identified (hw.id is required there).
func (c *collection) attributes(r *reading) (own, hw attribute.Set, isGPU bool) {
	kvs := append([]attribute.KeyValue{BackendKey.String(r.kind.String()), OrdinalKey.Int(r.ordinal)}, c.attrs...)
	uuid := ""
	if r.infoErr == nil {
		uuid = r.info.UUID
	}
	if uuid != "" {
		kvs = append(kvs, semconv.HwIDKey.String(uuid))
	}
	own = attribute.NewSet(kvs...)
	if r.kind == memtrack.KindCPU || uuid == "" {
		return own, attribute.Set{}, false
	}
	kvs = append([]attribute.KeyValue{semconv.HwIDKey.String(uuid), semconv.HwTypeGpu, semconv.HwNameKey.String(r.name)}, c.attrs...)
	if r.info.Name != "" {
		kvs = append(kvs, semconv.HwModelKey.String(r.info.Name))
	}
	if v := vendor(r.kind); v != "" {
		kvs = append(kvs, semconv.HwVendorKey.String(v))
	}
	return own, attribute.NewSet(kvs...), true
}
