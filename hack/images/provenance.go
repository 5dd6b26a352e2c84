package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SLSA provenance v1 as an in-toto Statement v1 (https://slsa.dev/spec/v1.0/provenance).
const (
	predicateSLSAv1 = "https://slsa.dev/provenance/v1"
	// buildType names this build's recipe: `make release` (hack/images dist), documented in
	// docs/install.md.
	buildType = "https://github.com/httpscale/httpscale/blob/main/docs/install.md#release-artifacts"
	// localBuilder is the builder id of a `make release` outside GitHub Actions.
	localBuilder = "https://github.com/httpscale/httpscale/blob/main/Makefile#release"
)

var reGitCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// provenanceInput is what a release's provenance states.
type provenanceInput struct {
	Release   *Release
	Platforms []string
	GoVersion string
	// Subjects are name → sha256 hex of everything the build produced that a user pulls: the image
	// indexes and the chart archive. Byproducts are the SBOMs.
	Subjects, Byproducts map[string]string
	Started, Finished    time.Time
	// Getenv reads the CI environment (GITHUB_*); os.Getenv in the binary.
	Getenv func(string) string
}

// Provenance returns the unsigned SLSA v1 provenance of a release as indented JSON. In GitHub Actions
// the builder is the workflow run (GITHUB_WORKFLOW_REF, run id and attempt), elsewhere the Makefile's
// release target; the release workflow also has GitHub sign its own provenance for each image
// (actions/attest-build-provenance), which this file does not replace.
func Provenance(in provenanceInput) ([]byte, error) {
	r := in.Release
	ext, err := structpb.NewStruct(map[string]any{
		"version":   r.Version,
		"registry":  r.Registry,
		"platforms": toAny(in.Platforms),
		"source":    map[string]any{"uri": r.Source, "commit": r.Commit},
	})
	if err != nil {
		return nil, err
	}
	internal, err := structpb.NewStruct(map[string]any{
		"goVersion":       in.GoVersion,
		"sourceDateEpoch": fmt.Sprint(r.Created.Unix()),
		"goFlags":         "CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags=-s -w -buildid= GOAMD64=v1 GOARM64=v8.0",
	})
	if err != nil {
		return nil, err
	}
	commit, dirty := strings.CutSuffix(r.Commit, "-dirty")
	src := &intoto.ResourceDescriptor{Uri: "git+" + r.Source}
	notes := map[string]any{}
	if reGitCommit.MatchString(commit) {
		src.Digest = map[string]string{"gitCommit": commit}
	} else {
		notes["commit"] = commit // not a full hash (--commit given by hand)
	}
	if dirty {
		notes["dirty"] = true
	}
	if len(notes) > 0 {
		src.Annotations, _ = structpb.NewStruct(notes)
	}
	builder, invocation := localBuilder, ""
	if in.Getenv("GITHUB_ACTIONS") == "true" {
		server := strings.TrimSuffix(in.Getenv("GITHUB_SERVER_URL"), "/")
		builder = server + "/" + in.Getenv("GITHUB_WORKFLOW_REF")
		invocation = fmt.Sprintf("%s/%s/actions/runs/%s/attempts/%s", server, in.Getenv("GITHUB_REPOSITORY"),
			in.Getenv("GITHUB_RUN_ID"), in.Getenv("GITHUB_RUN_ATTEMPT"))
	}
	pred := &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{
			BuildType:            buildType,
			ExternalParameters:   ext,
			InternalParameters:   internal,
			ResolvedDependencies: []*intoto.ResourceDescriptor{src},
		},
		RunDetails: &slsa.RunDetails{
			Builder: &slsa.Builder{Id: builder},
			Metadata: &slsa.BuildMetadata{
				InvocationId: invocation,
				StartedOn:    timestamppb.New(in.Started.UTC()),
				FinishedOn:   timestamppb.New(in.Finished.UTC()),
			},
			Byproducts: descriptors(in.Byproducts),
		},
	}
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("provenance predicate: %w", err)
	}
	predJSON, err := protojson.Marshal(pred)
	if err != nil {
		return nil, err
	}
	predStruct := &structpb.Struct{}
	if err := protojson.Unmarshal(predJSON, predStruct); err != nil {
		return nil, err
	}
	st := &intoto.Statement{
		Type:          intoto.StatementTypeUri,
		Subject:       descriptors(in.Subjects),
		PredicateType: predicateSLSAv1,
		Predicate:     predStruct,
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("provenance statement: %w", err)
	}
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(st)
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// descriptors turns name → sha256 hex into resource descriptors, in name order.
func descriptors(m map[string]string) []*intoto.ResourceDescriptor {
	var out []*intoto.ResourceDescriptor
	for _, name := range sortedKeys(m) {
		out = append(out, &intoto.ResourceDescriptor{Name: name, Digest: map[string]string{"sha256": m[name]}})
	}
	return out
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// readProvenance decodes a provenance file (tests).
func readProvenance(path string) (*intoto.Statement, *slsa.Provenance, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	st := &intoto.Statement{}
	if err := protojson.Unmarshal(raw, st); err != nil {
		return nil, nil, err
	}
	predJSON, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, nil, err
	}
	pred := &slsa.Provenance{}
	return st, pred, protojson.Unmarshal(predJSON, pred)
}
