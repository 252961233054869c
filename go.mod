module github.com/memtrack/memtrack

go 1.24.0

require (
	github.com/google/pprof v0.0.0-20250820193118-f64d9cf942d6
	github.com/mumax/3 v0.0.0-20261020084628-54efa12420b2
	github.com/prometheus/client_golang v1.23.2
	github.com/stretchr/testify v1.12.1
	go.uber.org/atomic v1.12.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.35.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
