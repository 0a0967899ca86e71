// Package prom serves the collector's snapshots as Prometheus metrics
// (`watch --listen`, the demo's --listen): an Exporter holds the latest
// snapshot and reads it at each scrape, so a scrape never queries the
// database. docs/metrics.md lists the metrics; contrib/grafana holds a
// dashboard over them.
package prom
