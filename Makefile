# httpscale — HTTP scale-to-zero for Kubernetes.
# `make help` lists the targets. The two set-up commands are `make demo` and `make test`.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
BIN ?= bin
CONTROLLER_GEN := $(GO) tool controller-gen
# Images: `make images` builds bin/images/<component> (OCI layouts); `make images-push` pushes them to
# $(REGISTRY)/<component>:$(TAG). The defaults are the references the chart uses for its appVersion.
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/httpscale/Chart.yaml)
REGISTRY ?= ghcr.io/httpscale
TAG ?= $(APP_VERSION)
PLATFORMS ?= linux/amd64,linux/arm64
INSECURE ?= false
# Releases: `make release REGISTRY=... VERSION=...` (docs/install.md#release-artifacts). VERSION is the
# chart's and the app's version; the default is what Chart.yaml says.
VERSION ?= $(APP_VERSION)
RELEASE_DIR ?= $(BIN)/release
IMAGES := $(GO) -C hack/images run .
GENERATED := api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/operator config/rbac/interceptor config/rbac/scaler \
	config/webhook charts/httpscale/crds charts/httpscale/templates

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build the operator, interceptor and scaler into bin/.
	$(GO) build -o $(BIN)/ ./operator ./interceptor ./scaler

.PHONY: images
images: ## Build the operator, interceptor and scaler images (linux/amd64+arm64, reproducible) as OCI layouts in bin/images/<component>, tagged $(TAG).
	$(IMAGES) build --root $(CURDIR) --out $(CURDIR)/$(BIN)/images --version $(TAG) --platforms $(PLATFORMS)

.PHONY: images-push
images-push: images ## Build the images and push them to $(REGISTRY)/<component>:$(TAG) (defaults: what the chart references).
	$(IMAGES) push --out $(CURDIR)/$(BIN)/images --registry $(REGISTRY) --tag $(TAG) --insecure=$(INSECURE)

.PHONY: images-verify
images-verify: ## Build the images twice from this commit and fail unless every digest is equal.
	mkdir -p $(BIN)
	$(IMAGES) build --root $(CURDIR) --out $(CURDIR)/$(BIN)/images --version $(TAG) --platforms $(PLATFORMS) | tee $(BIN)/images.digests
	$(IMAGES) build --root $(CURDIR) --out $(CURDIR)/$(BIN)/images-again --version $(TAG) --platforms $(PLATFORMS) | sed 's|/images-again/|/images/|' > $(BIN)/images-again.digests
	diff $(BIN)/images.digests $(BIN)/images-again.digests && echo "reproducible: both builds gave the same digests"

##@ Release

.PHONY: dist
dist: ## Build every release artifact of VERSION for REGISTRY into bin/release: image layouts, SBOMs, the chart, provenance, SHA256SUMS (no network).
	$(IMAGES) dist --root $(CURDIR) --out $(CURDIR)/$(RELEASE_DIR) --registry $(REGISTRY) --version $(VERSION) --platforms $(PLATFORMS)

.PHONY: release
release: dist ## dist, then push the images to $(REGISTRY)/<component>:$(VERSION) and the chart to oci://$(REGISTRY)/charts (helm push).
	$(IMAGES) publish --out $(CURDIR)/$(RELEASE_DIR) --insecure=$(INSECURE) --helm "$${HELM:-$$(hack/tools.sh helm | tail -n1)/helm}"

.PHONY: release-check
release-check: ## Fail unless VERSION may be released: Chart.yaml's version and appVersion are VERSION and CHANGELOG.md dates it.
	$(IMAGES) check --root $(CURDIR) --version $(VERSION)

.PHONY: release-notes
release-notes: ## Print VERSION's CHANGELOG.md section (the GitHub release's notes).
	@$(IMAGES) notes --root $(CURDIR) --version $(VERSION)

.PHONY: generate
generate: ## Regenerate deepcopy code from the API types.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: ## Regenerate the CRDs (config/crd/bases), per-component RBAC (config/rbac/<component>) and the webhook configuration (config/webhook), and copy them into the chart.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=httpscale-operator paths=./operator/... output:rbac:artifacts:config=config/rbac/operator
	$(CONTROLLER_GEN) rbac:roleName=httpscale-interceptor paths=./interceptor/... output:rbac:artifacts:config=config/rbac/interceptor
	$(CONTROLLER_GEN) rbac:roleName=httpscale-scaler paths=./scaler/... output:rbac:artifacts:config=config/rbac/scaler
	$(CONTROLLER_GEN) webhook paths=./operator/webhook/... output:webhook:artifacts:config=config/webhook
	hack/chart-sync.sh

.PHONY: chart-sync
chart-sync: ## Copy CRDs and generated RBAC into charts/httpscale, and re-render config/default/httpscale.yaml with Helm.
	hack/chart-sync.sh
	hack/render-install.sh

##@ Test

.PHONY: chart-test
chart-test: ## helm lint --strict, helm template checks, and the chart install on a real API server with RBAC.
	$(GO) test -count=1 ./charts/...

.PHONY: tools
tools: ## Build (or reuse from the cache outside the clone) kube-apiserver, etcd and kubectl for envtest, and helm.
	hack/tools.sh envtest >/dev/null
	hack/tools.sh helm >/dev/null

.PHONY: lint
lint: ## actionlint on the GitHub workflows (with shellcheck on their scripts).
	"$$(hack/tools.sh actionlint | tail -n1)/actionlint" -no-color

.PHONY: verify-generated
verify-generated: ## Fail if regenerating code or manifests changes anything.
	hack/verify-generated.sh $(GENERATED)

.PHONY: vet
vet: ## gofmt check, then go vet every package (and the image builder's module).
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) -C hack/images vet ./...

# TestFiftyThousandAppsFit is a capacity test, skipped under -race: it runs once more without it.
.PHONY: unit
unit: ## Unit and envtest suites (real kube-apiserver + etcd, built on first use).
	export KUBEBUILDER_ASSETS="$$(hack/tools.sh envtest | tail -n1)" HELM="$$(hack/tools.sh helm | tail -n1)/helm" \
		PROMTOOL="$$(hack/tools.sh promtool | tail -n1)/promtool"; \
	$(GO) test -race -count=1 ./... && \
	$(GO) test -count=1 -run '^TestFiftyThousandAppsFit$$' ./pkg/routing/ && \
	$(GO) -C hack/images test -count=1 ./...

.PHONY: test
test: verify-generated vet lint build unit e2e ## Everything: generated-file drift, vet, workflow lint, build, unit + envtest, e2e (root).

# The differential fuzz targets of the engine's HTTP/1.1 (package:target; pkg/proxy/engine/h1 holds the
# byte-level parsers and writers to net/http, pkg/proxy/engine the event loops and the head watch); `make
# unit` runs them on their seed corpora only.
FUZZTIME ?= 2m
FUZZ_TARGETS := h1:FuzzFastRequest h1:FuzzRawRequestWrite h1:FuzzRawResponse h1:FuzzResponseWriter \
	h1:FuzzRelayResponse h1:FuzzChunked h1:FuzzRewrittenTarget engine:FuzzEventLoopRelay engine:FuzzHeadWatch

.PHONY: fuzz
fuzz: ## Fuzz the engine's HTTP/1.1 parsers, writers and event loops against net/http, FUZZTIME (2m) per target.
	for pt in $(FUZZ_TARGETS); do \
		case $${pt%%:*} in h1) pkg=./pkg/proxy/engine/h1/ ;; *) pkg=./pkg/proxy/engine/ ;; esac; \
		t=$${pt#*:}; \
		$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s $$pkg || exit 1; \
	done

.PHONY: e2e
e2e: ## End-to-end suite: the chart's real pods from our images on a local control plane with real nodes (root; tools built on first use).
	$(GO) test -tags e2e -count=1 -timeout 60m -v ./e2e -ginkgo.v

##@ Demo

.PHONY: demo
demo: ## Run the whole system (the chart's pods from our images) on a local control plane with real nodes and a sample app (root); leaves it running.
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop the demo's processes and remove its network namespace.
	$(GO) run ./hack/cluster --name $${HTTPSCALE_DEMO_CLUSTER:-demo} down
