// Package dashboards holds memtrack's Grafana dashboards, as JSON files to
// import into Grafana, and the tests that check them against the metrics of
// package prom: statically, with promtool over laid-out series, and on a
// Prometheus server scraping examples/profile (where
// MEMTRACK_PROMETHEUS_SERVER is set, as .ci/run sets it). It has no Go API.
//
// memtrack.json shows, per device, the tracked figure beside what the OS or
// driver reports, the peak, the limit, allocation failures and churn, and,
// where dcgm-exporter is scraped too, each GPU's tracked bytes beside the
// framebuffer dcgm-exporter reports used, joined on the GPU's UUID.
package dashboards
