# The usual entry points. CI runs .ci/run, which `make ci` runs too.
.PHONY: help test race lint fuzz bench e2e ci

help: ## list the targets
	@grep -E '^[a-z0-9]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

test: ## the test suite (starts its own PostgreSQL)
	go test ./...

race: ## the test suite under the race detector, as CI runs it
	go test -race ./...

lint: ## golangci-lint with .golangci.yml (installs v2.15.0 when missing)
	@command -v golangci-lint >/dev/null || go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
	golangci-lint run ./...

fuzz: ## every fuzz target briefly (FUZZTIME=10s each)
	scripts/fuzz.sh

bench: ## the collector's and engine's benchmarks
	go test -run '^$$' -bench . ./collector/ ./engine/

e2e: ## the tests that run pooltop as processes: fleet, chaos, tmux, PgBouncer
	go test -race -run 'Fleet|Chaos|Tmux|PgBouncer|Demo' ./internal/cli/

ci: ## what CI runs: install what is missing, gofmt, vet, lint, fuzz, tests
	bash .ci/run
