// Package catalogue describes every alert the collector raises: what it
// means, the figure and threshold it watches, when it is raised and
// cleared, whom it reaches and the runbook to follow. The dashboard's
// runbook panel, `pooltop alerts`, the Prometheus rules file in
// contrib/prometheus and docs/alerts.md are all made from it, so they
// cannot disagree. The alerts themselves are raised by the collector
// (collector.AlertConfig holds their thresholds).
package catalogue
