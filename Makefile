# kvmesh — the two commands a newcomer needs are `make demo` and `make test`.
GO        ?= go
PKGS      ?= ./...
# Each fuzz target runs for FUZZTIME in `make fuzz`.
FUZZTIME  ?= 20s
# `make bench` runs each benchmark BENCHCOUNT times (feed the output to benchstat).
BENCHCOUNT ?= 5
BENCH     ?= .
# The whole suite must pass in under 8 minutes on 2 cores with one of them
# kept busy by something else (no test asserts a rate or a wall-clock
# deadline; waits are liveness bounds). This bound, per package, makes a hung
# test fail loudly instead of eating CI's 90 minutes.
TESTTIMEOUT ?= 8m

.PHONY: all build test vet tidy bench fuzz demo clean bench-e2e bench-mesh bench-workloads

all: build

build:
	$(GO) build ./...

vet:
	@echo "== go vet $(VETFLAGS) $(PKGS): static checks of all $$($(GO) list $(PKGS) | wc -l) packages (prints only problems; on a fresh clone it first compiles everything, two or three minutes)"
	$(GO) vet $(VETFLAGS) $(PKGS)
	@echo "== go vet: no problems"
	@echo "== gofmt -l: every Go file is formatted"
	@out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$($(GO) list -f '{{.Dir}}' $(PKGS))); \
	  if [ -n "$$out" ]; then echo "gofmt would change (run gofmt -w on them):"; echo "$$out"; exit 1; fi

# go.mod and go.sum must be exactly what `go mod tidy` makes (direct
# dependencies not marked indirect, nothing unused): CI fails otherwise.
tidy:
	@echo "== go mod tidy -diff: go.mod and go.sum are exactly what go mod tidy makes"
	$(GO) mod tidy -diff

# make test vets with the tests' own build settings (-race): vet needs every
# package compiled, and with the same settings that compile is the test run's
# too, not a second one (on a fresh clone, vet and the tests' compile took 220 s
# of wall time on 2 idle cores, against 325 s with vet's default settings).
# Only files behind a "!race" build constraint go unvetted there; `make vet`
# alone checks the default build.
test: VETFLAGS = -race
test: tidy vet
	@echo "== go test -race: every package's tests under the race detector; one line per package as it finishes (in package order; the slowest, mesh and integration, take a minute or two)"
	$(GO) test -race -timeout $(TESTTIMEOUT) $(PKGS)

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCHCOUNT) $(PKGS)

# Runs every Fuzz* target in the repository for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== fuzz $$pkg $$t ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

demo:
	@bash integration/demo/demo.sh

# The published end-to-end benchmarks (docs/bench/): every arm on the first 20
# minutes of the Mooncake trace, 8 simulated backends, 3 repeats, at twice and
# three times the trace's request rate. About an hour and a half in all.
BENCH_ARMS = round_robin,least_loaded,consistent_hash,sglang_cache_aware,kvmesh,kvmesh+words,oracle,kvmesh:8:mesh,kvmesh:8:claims,kvmesh:3:local
bench-e2e:
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -duration 20m -compression 2 -arms $(BENCH_ARMS) -publish mooncake-2x
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -duration 20m -compression 3 -arms $(BENCH_ARMS) -publish mooncake-3x

# The mesh-scaling benchmark (docs/bench/mesh-scaling-*): 1, 2, 4 and 8
# kvmesh nodes behind a random spread, sharing claims and load through the
# mesh, at 2x and 3x the trace's rate. About 30 minutes on 2 cores.
MESH_ARMS = kvmesh,kvmesh:2:mesh,kvmesh:4:mesh,kvmesh:8:mesh,kvmesh:8:claims
bench-mesh:
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -duration 20m -compression 2 -arms $(MESH_ARMS) -publish mesh-scaling-2x
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -duration 20m -compression 3 -arms $(MESH_ARMS) -publish mesh-scaling-3x

# The workload benchmarks (docs/bench/customers, agent, mesh-agent): llm-d's
# customers shape and the coding-agent shape with every single-node arm, and
# the agent shape over 1, 2 and 8 mesh nodes. About 30 minutes.
WORKLOAD_ARMS = round_robin,least_loaded,consistent_hash,sglang_cache_aware,kvmesh,oracle
bench-workloads:
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -workload customers -arms $(WORKLOAD_ARMS) -publish customers
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -workload agent -arms $(WORKLOAD_ARMS) -publish agent
	$(GO) run -buildvcs=true ./cmd/kvmesh-bench run -workload agent -arms kvmesh,kvmesh:2:mesh,kvmesh:8:mesh -repeats 6 -publish mesh-agent

clean:
	$(GO) clean -testcache
